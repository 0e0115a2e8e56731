"""Every ``geosteer`` verb that loads a model takes ``--device`` and ``--dtype`` and passes them to loading;
bad values are one line, exit 2. The walk fails when a new verb is added without being classified here."""

from __future__ import annotations

import pytest

from geosteer.cli import app
from geosteer.cli.common import run_app
from tests.cli_helpers import command_leaves

# verbs that load no model (artifacts, figures, the Hub, from-scratch byte models, a tokenizer only)
NO_MODEL = {"push", "report", "study report", "show", "manifold edit", "study directional plot",
            "study directional pretrain", "tasks build", "recipe save", "recipe show",
            "eval", "bench judge", "bench decide", "study manifold asymmetry", "study dynamics significance",
            "study checks"}
# eval: lm-eval's own arguments pass through (its --model names the lm-eval model type); asymmetry and
# significance read artifacts / results files only; bench decide runs its fixed design on SmolLM2 (read by
# Gemma); bench judge reads texts (its judges are sentence embeddings); study checks runs on the tiny families it
# names itself


def _option(cmd, flag: str):
    return next((p for p in cmd.params if flag in getattr(p, "opts", ())), None)


def test_every_model_loading_verb_has_device_and_dtype():
    leaves = command_leaves()
    assert NO_MODEL <= set(leaves), sorted(NO_MODEL - set(leaves))
    loading = {v: c for v, c in leaves.items() if v not in NO_MODEL}
    assert len(loading) >= 30  # every method's verbs are registered
    for verb, cmd in loading.items():
        assert _option(cmd, "--model") is not None, f"{verb}: not in NO_MODEL but has no --model"
        if verb == "serve":
            continue  # vLLM places and casts the weights itself (its --dtype/--device go after `--`)
        dev, dt = _option(cmd, "--device"), _option(cmd, "--dtype")
        assert dev is not None and dt is not None, f"geosteer {verb} lacks --device/--dtype"
        assert (dev.default, dt.default) == ("cpu", "float32"), verb  # the shared options, not look-alikes
        assert not dt.hidden and "weights" in dt.help, verb
    for verb in NO_MODEL:
        assert _option(leaves[verb], "--device") is None and _option(leaves[verb], "--dtype") is None, verb
    # the artifact storage dtype is --save-dtype on the two verbs that write surfaces
    for verb in ("learn surfaces", "manifold edit"):
        assert _option(leaves[verb], "--save-dtype") is not None, verb


class _Loaded(Exception):
    pass


@pytest.fixture
def recorder(monkeypatch):
    """Replace the loader: record what it was asked for, then stop the verb (no model is built)."""
    seen: list[dict] = []

    def fake(name, dtype=None, device=None, **kw):
        seen.append({"name": name, "dtype": dtype, "device": device})
        raise _Loaded

    monkeypatch.setattr("geosteer.models.loading.load_model", fake)
    monkeypatch.setattr("geosteer.load_model", fake)
    return seen


# one verb per CLI module (and a few more), with the options each needs to reach the model load
PASS_THROUGH = [
    ["info"], ["measure", "decompose"], ["study", "dynamics", "ablate"], ["study", "directional", "sweep"],
    ["study", "directional", "diagonal"], ["measure", "diagnose"], ["learn", "gates", "--out", "OUT"],
    ["study", "dynamics", "critical", "--layers", "0"], ["study", "dynamics", "continuation", "--layer", "0"],
    ["study", "dynamics", "prefix-spread"], ["learn", "surfaces", "--out", "OUT"], ["demo"],
    ["studio", "--workspace", "OUT"],
]


@pytest.mark.parametrize("args", PASS_THROUGH, ids=lambda a: " ".join(a[:2]))
def test_device_and_dtype_reach_the_loader(recorder, tmp_path, args):
    args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
    with pytest.raises(_Loaded):
        run_app(app, [*args, "--model", "tiny-llama", "--device", "meta", "--dtype", "bfloat16"])
    assert recorder == [{"name": "tiny-llama", "dtype": "bfloat16", "device": "meta"}]


@pytest.mark.parametrize("args,needle", [
    (["measure", "diagnose", "--dtype", "int8"], "unknown dtype 'int8'"),
    (["study", "directional", "heads", "--device", "cuda:99"], "device 'cuda:99' is not available"),
    (["learn", "surfaces", "--out", "OUT", "--steps", "1", "--dtype", "int8"], "unknown dtype 'int8'"),
    (["measure", "explore", "--surfaces", "OUT", "--device", "nonsense"], "invalid device 'nonsense'"),
])
def test_bad_device_or_dtype_is_one_line_exit_2(capsys, tmp_path, args, needle):
    args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
    with pytest.raises(SystemExit) as e:
        run_app(app, [*args, "--model", "tiny-llama"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and err.startswith("error: ")
    assert needle in err
    assert not (tmp_path / "out").exists()


def test_manifold_train_dtype_note_and_save_dtype(capsys, tmp_path):
    """--dtype on ``learn surfaces`` is the model's (a note says so); the storage dtype is --save-dtype."""
    out = tmp_path / "s"
    with pytest.raises(SystemExit) as e:
        run_app(app, ["learn", "surfaces", "--model", "tiny-llama", "--out", str(out), "--save-dtype", "int8"])
    assert e.value.code == 2 and "storage dtype must be one of" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run_app(app, ["learn", "surfaces", "--model", "tiny-llama", "--out", str(out), "--dtype", "float16",
                      "--layers", "99"])  # refused once the model is loaded: after the note
    err = capsys.readouterr().err
    assert "note: --dtype float16 sets the model weights" in err and "out of range" in err

