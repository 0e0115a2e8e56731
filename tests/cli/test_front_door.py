"""One steering front door: every verb that runs a steered model takes ``--set key=value`` and it reaches the
model (the forwards the verb runs give the logits of ``geosteer.steer(model, InterventionSpec(...))`` on the
same tiny model, not the stock ones); bad values and a second ``--surfaces`` are one line before a model loads."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import torch

import geosteer
import geosteer.cli  # noqa: F401 - the command tree first (its verbs' modules import it)
from geosteer.recipe import InterventionSpec
from tests.cli_helpers import refused_before_load, run_cli

SETTING = ("beta_attn", 0.5)  # a cheap key: the attention update's gain on every layer
PROBE = torch.arange(1, 9)[None]  # token ids the studio's and eval's model is run on after the verb


class Recorded:
    """A tiny-llama whose every forward without a cache yet is recorded: (input ids, its kwargs, logits)."""

    def __init__(self, model=None):
        self.model = model if model is not None else geosteer.load_model("tiny-llama")[0]
        self.calls: list[tuple[torch.Tensor, dict, torch.Tensor]] = []
        self._fresh = False
        self.model.register_forward_pre_hook(self._pre, with_kwargs=True)
        self.model.register_forward_hook(self._post, with_kwargs=True)

    def _pre(self, module, args, kwargs):
        cache = kwargs.get("past_key_values", kwargs.get("cache"))
        self._fresh = cache is None or cache.get_seq_length() == 0

    def _post(self, module, args, kwargs, out):
        if self._fresh and len(self.calls) < 12:  # a few are enough; the reference re-runs each
            ids = kwargs.get("input_ids", args[0] if args else None)
            extra = {k: v for k, v in kwargs.items() if k in ("attention_mask", "position_ids", "logits_to_keep")}
            self.calls.append((ids.detach().clone(), extra, out.logits.detach().clone()))

    def probe(self) -> None:
        with torch.no_grad():
            self.model(input_ids=PROBE)


def _check_steered(calls) -> None:
    """Each recorded forward is the stock model's or the steered one's; at least one is steered, and differs."""
    reference, _ = geosteer.load_model("tiny-llama")  # a second copy: the same weights (seeded)
    spec = InterventionSpec(**dict([SETTING]))
    assert calls, "the verb ran no forward"
    steered_seen = 0
    for ids, extra, logits in calls:
        with torch.no_grad():
            stock = reference(input_ids=ids, **extra).logits
            with geosteer.steer(reference, spec):
                steered = reference(input_ids=ids, **extra).logits
        assert (stock - steered).abs().max() > 1e-3  # the setting changes these logits
        is_steered = torch.allclose(logits, steered, rtol=1e-4, atol=1e-5)
        assert is_steered or torch.allclose(logits, stock, rtol=1e-4, atol=1e-5), "neither stock nor steered"
        steered_seen += is_steered
    assert steered_seen, "no forward of the verb ran the steered model"


def _run(monkeypatch, capsys, *args) -> None:
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err


def _eval_argv(monkeypatch, rec):
    pytest.importorskip("lm_eval")
    import geosteer.integrations.lm_eval as glm

    def main(argv):  # instead of lm-eval's run: the geosteer model its --model_args build, probed
        from lm_eval.utils import simple_parse_args_string

        from geosteer.cli.evaluate import _option_values

        assert _option_values(argv, ("--model",)) == ["geosteer"]
        given = {}
        for chunk in _option_values(argv, ("--model_args", "-a")):  # every --model_args, merged as lm-eval does
            given.update(simple_parse_args_string(chunk))
        lm = glm.GeosteerLM(**given)
        Recorded.__init__(rec, lm._model)
        rec.probe()

    monkeypatch.setattr(glm, "main", main)
    return ["eval", "--model_args", "pretrained=tiny-llama", "--tasks", "x"]


def _studio_argv(monkeypatch, rec, tmp_path):
    import uvicorn

    monkeypatch.setattr("geosteer.studio.cli.load", lambda name, **kw: (rec.model, geosteer.load_model(name)[1]))
    monkeypatch.setattr("geosteer.studio.cli.listen_socket", lambda host, port: socket.socket())
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: [s.close() for s in sockets])
    return ["studio", "-m", "tiny-llama", "--workspace", str(tmp_path / "ws"), "--results", str(tmp_path)]


VERBS = {
    "ppl": ["ppl", "-m", "tiny-llama", "--corpus", "heldout", "--max-tokens", "40", "--context", "32",
            "--stride", "16"],
    "generate": ["generate", "-m", "tiny-llama", "-p", "The theory of relativity", "--max-new-tokens", "2"],
    "compare": ["compare", "-m", "tiny-llama", "-p", "The theory of relativity", "--max-new-tokens", "2"],
    "demo": ["demo", "-m", "tiny-llama", "--tokens", "40", "--max-new-tokens", "2"],
    "studio": None,
    "eval": None,
}


@pytest.mark.parametrize("verb", list(VERBS))
def test_set_reaches_the_model(verb, monkeypatch, capsys, tmp_path):
    rec = Recorded(None if verb == "eval" else geosteer.load_model("tiny-llama")[0])
    if verb == "eval":
        argv = _eval_argv(monkeypatch, rec)
    elif verb == "studio":
        argv = _studio_argv(monkeypatch, rec, tmp_path)
    else:
        argv = VERBS[verb]
        monkeypatch.setattr("geosteer.eval.cli.load", lambda name, **kw: (rec.model, geosteer.load_model(name)[1]))
        monkeypatch.setattr(geosteer, "load_model", _first(rec, geosteer.load_model))  # the demo's loader
        if verb == "demo":
            argv = [*argv, "--out-dir", str(tmp_path / "demo")]
            monkeypatch.setattr("geosteer.demo.QUALITY_TOKENS", 2)  # its text-quality phase, short
    _run(monkeypatch, capsys, *argv, "--set", f"{SETTING[0]}={SETTING[1]}")
    if verb == "studio":
        rec.probe()  # the studio keeps the recipe's settings attached for its session
    _check_steered(rec.calls)


def _first(rec, load_model):
    """``load_model`` whose model is the recorded one (its tokenizer loaded as usual)."""
    def load(name, **kw):
        return rec.model, load_model(name, **kw)[1]
    return load


def _surfaces_pair(tmp_path) -> tuple[Path, Path]:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    return a, b


STEERING_ARGV = {
    "ppl": ["ppl", "-m", "tiny-llama", "--corpus", "heldout"],
    "generate": ["generate", "-m", "tiny-llama", "-p", "x"],
    "compare": ["compare", "-m", "tiny-llama", "-p", "x"],
    "demo": ["demo", "-m", "tiny-llama"],
    "studio": ["studio", "-m", "tiny-llama"],
    "eval": ["eval", "--tasks", "x"],
}


@pytest.mark.parametrize("bad, needle", [
    (["--set", "beta_attn=abc"], "beta_attn must be a number (got 'abc')"),
    (["--set", "bogus=1"], "bogus"),
    (["--set", "beta_attn"], "expected key=value"),
    (["--surfaces", "A", "--set", "surfaces=B"], "name different surfaces"),
])
@pytest.mark.parametrize("verb", list(STEERING_ARGV))
def test_bad_settings_are_one_line_before_a_model_loads(verb, bad, needle, monkeypatch, capsys, tmp_path):
    if verb == "eval":
        pytest.importorskip("lm_eval")
        import geosteer.integrations.lm_eval as glm

        monkeypatch.setattr(glm, "main", lambda argv: pytest.fail("lm-eval ran"))
    a, b = _surfaces_pair(tmp_path)
    bad = [str(a) if x == "A" else f"surfaces={b}" if x == "surfaces=B" else x for x in bad]
    line = refused_before_load(monkeypatch, capsys, *STEERING_ARGV[verb], *bad)
    assert needle in line


def test_the_same_folder_twice_is_one_setting(tmp_path):
    from geosteer.cli.recipe import with_surfaces

    a, _ = _surfaces_pair(tmp_path)
    assert with_surfaces([f"surfaces={a}", "beta_attn=0.5"], a) == [f"surfaces={a}", "beta_attn=0.5"]
    assert with_surfaces([f"surfaces={a}/../a"], a) == [f"surfaces={a}/../a"]  # resolves to the same folder
    assert with_surfaces(["beta_attn=0.5"], a) == ["beta_attn=0.5", f"surfaces={a}"]
    assert with_surfaces(None, None) == []
