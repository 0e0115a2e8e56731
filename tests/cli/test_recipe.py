"""The recipe is the front door: ``--recipe``/``--set`` on ppl, generate and compare give exactly the numbers
of the same verb run on a model with the interventions built by hand from the Python API; the paper studies
``study dynamics ablate|gains`` give the ``ppl --windows independent`` numbers to the last digit; bad
settings are one line before any model loads."""

from __future__ import annotations

import json
from contextlib import contextmanager

import pytest
import torch

from geosteer.interventions import steer
from tests.cli_helpers import one_line_exit_2, run_cli

PPL = ("ppl", "-m", "tiny-llama", "--corpus", "heldout", "--max-tokens", "64", "--context", "32",
       "--stride", "16", "--json")
GEN = ("generate", "-m", "tiny-llama", "-p", "The theory of relativity", "--max-new-tokens", "6", "--json")
CMP = ("compare", "-m", "tiny-llama", "-p", "The theory of relativity", "--max-new-tokens", "5", "--json")


@pytest.fixture(scope="module")
def tiny(tiny_model):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a 3-layer model: one thread is many times faster on a shared machine
    yield tiny_model("llama")
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def surfaces(tiny, tmp_path_factory):
    import geosteer.manifold as M

    model, _ = tiny
    bank = M.install(model, grid_size=4, grid_range=(-4.0, 4.0))
    M.uninstall(model)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in bank.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return M.save(bank, tmp_path_factory.mktemp("front") / "surfaces")


@contextmanager
def cli_model(monkeypatch, tiny, *interventions):
    """Every verb gets the shared tiny model (with ``interventions`` attached for the reference run)."""
    import geosteer.cli.common as common

    model, tok = tiny

    def load(name, **kw):
        assert name == "tiny-llama"
        return model, tok

    for mod in ("geosteer.eval.cli", "geosteer.directional.cli", "geosteer_paper.dynamics.studies.common"):
        monkeypatch.setattr(f"{mod}.load", load)
    monkeypatch.setattr(common, "load", load)
    with steer(model, *interventions):
        yield


def _json(monkeypatch, capsys, *args):
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    return json.loads(out)


def _by_hand(name: str, model, surfaces_dir) -> list:
    """The interventions of each test recipe, built from the method modules (not through the recipe)."""
    import geosteer.manifold as M
    from geosteer.directional.sites import ComponentScale
    from geosteer.dynamics.variants import FFNVariant, Gains

    parts = {"surfaces": lambda: [M.load(surfaces_dir, model=model)],
             "directional": lambda: [ComponentScale("attn_out", 0.0, 1.0, [0, 2])],
             "dynamics": lambda: [FFNVariant("radial", None), Gains(0.7, 1.0, None)]}
    names = list(parts) if name == "mixed" else [name]
    return [iv for n in names for iv in parts[n]()]


def _settings(name: str, surfaces_dir) -> list[str]:
    parts = {"surfaces": [f"surfaces={surfaces_dir}"],
             "directional": ["scale_site=attn_out", "scale_par=0", "scale_layers=0;2"],
             "dynamics": ["mlp_variant=radial", "beta_attn=0.7"]}
    names = list(parts) if name == "mixed" else [name]
    return [s for n in names for s in parts[n]]


def _sets(settings: list[str]) -> list[str]:
    return [a for s in settings for a in ("--set", s)]


@pytest.mark.parametrize("recipe", ["surfaces", "directional", "dynamics", "mixed"])
def test_set_gives_the_python_api_numbers(recipe, tiny, surfaces, monkeypatch, capsys):
    model, _ = tiny
    sets = _sets(_settings(recipe, surfaces))
    with cli_model(monkeypatch, tiny):
        ours = {v: _json(monkeypatch, capsys, *args, *sets) for v, args in (("ppl", PPL), ("gen", GEN))}
        ours["cmp"] = _json(monkeypatch, capsys, *CMP, *sets)
    with cli_model(monkeypatch, tiny, *_by_hand(recipe, model, surfaces)):
        ref = {v: _json(monkeypatch, capsys, *args) for v, args in (("ppl", PPL), ("gen", GEN))}
    assert ours["ppl"] == ref["ppl"]  # every field, to the last digit
    assert ours["gen"] == ref["gen"]
    # compare: state a is the stock model, b the recipe; the Python API's compare_states on the same model
    from geosteer.eval.compare import compare_states, summarize

    prompt = CMP[CMP.index("-p") + 1]
    rows = compare_states(model, tiny[1], [prompt], [], _by_hand(recipe, model, surfaces), max_new_tokens=5,
                          sample_seeds=range(0), temperature=0.8, top_k=50)
    assert ours["cmp"] == json.loads(json.dumps({"summary": summarize(rows), "rows": rows}, default=str))
    assert ours["cmp"]["rows"][0]["kl"] > 1e-4  # the recipe does something


def test_recipe_folder_is_the_same_as_its_settings(tiny, surfaces, tmp_path, monkeypatch, capsys):
    settings = _settings("mixed", surfaces)
    with cli_model(monkeypatch, tiny):
        saved = _json(monkeypatch, capsys, "recipe", "save", str(tmp_path / "r"), "--base-model", "tiny-llama",
                      *_sets(settings), "--json")
        assert saved["scale_site"] == "attn_out" and saved["beta_attn"] == 0.7
        shown = _json(monkeypatch, capsys, "recipe", "show", "--recipe", str(tmp_path / "r"), "--json")
        assert shown["mlp_variant"] == "radial" and shown["surfaces"].endswith("surfaces")
        via_set = _json(monkeypatch, capsys, *PPL, *_sets(settings))
        via_recipe = _json(monkeypatch, capsys, *PPL, "--recipe", str(tmp_path / "r"))
        assert via_recipe == via_set
        # --set on top of --recipe: the later setting wins
        over = _json(monkeypatch, capsys, *PPL, "--recipe", str(tmp_path / "r"), "--set", "beta_attn=1")
        plain = _json(monkeypatch, capsys, *PPL, *_sets([s for s in settings if not s.startswith("beta")]))
        assert over == plain
        # --surfaces is --set surfaces=DIR
        assert (_json(monkeypatch, capsys, *PPL, "--surfaces", str(surfaces))
                == _json(monkeypatch, capsys, *PPL, "--set", f"surfaces={surfaces}"))


def test_a_component_scale_by_set_equals_the_python_api(tiny, monkeypatch, capsys):
    from geosteer.directional import ComponentScale
    from geosteer.eval.perplexity import heldout_ids, strided_perplexity

    model, tok = tiny
    ids = heldout_ids(tok, 64)
    with steer(model, ComponentScale("attn_out", s_par=0.0, layers=[1, 2])):
        by_hand = strided_perplexity(model, tok, ids=ids, context=32, stride=16)
    with cli_model(monkeypatch, tiny):
        new = _json(monkeypatch, capsys, *PPL, "--set", "scale_site=attn_out", "--set", "scale_par=0",
                    "--set", "scale_layers=1-2")
    assert new["ppl"] == by_hand.ppl and new["tokens"] == by_hand.tokens


def test_dynamics_ablate_and_gains_reproduced_to_the_last_digit(tiny, monkeypatch, capsys):
    ind = ("ppl", "-m", "tiny-llama", "--corpus", "heldout", "--windows", "independent", "--context", "32",
           "--max-tokens", "96", "--json")
    with cli_model(monkeypatch, tiny):
        ablate = _json(monkeypatch, capsys, "study", "dynamics", "ablate", "-m", "tiny-llama", "--variants",
                       "zero,radial", "--layers", "0-1", "--tokens", "96", "--context", "32", "--json")
        gains = _json(monkeypatch, capsys, "study", "dynamics", "gains", "-m", "tiny-llama", "--values", "0.5",
                      "--tokens", "96", "--context", "32", "--json")
        full = _json(monkeypatch, capsys, *ind)
        zero = _json(monkeypatch, capsys, *ind, "--set", "mlp_variant=zero", "--set", "mlp_layers=0-1")
        radial = _json(monkeypatch, capsys, *ind, "--set", "mlp_variant=radial", "--set", "mlp_layers=0-1")
        beta = _json(monkeypatch, capsys, *ind, "--set", "beta_attn=0.5")
        alpha = _json(monkeypatch, capsys, *ind, "--set", "alpha_mlp=0.5")
    loss = {r["variant"]: r["loss"] for r in ablate}
    assert (full["nll"], zero["nll"], radial["nll"]) == (loss["full"], loss["zero"], loss["radial"])
    gain = {r["gain"]: r["loss"] for r in gains}
    assert (beta["nll"], alpha["nll"]) == (gain["beta_attn"], gain["alpha_ffn"])
    assert full["windows"] == 3 and full["tokens"] == 3 * 31


@pytest.mark.parametrize("args, needle", [
    (("--set", "bogus=1"), "--set bogus: unknown recipe key; valid keys: surfaces (folder)"),
    (("--set", "scale_par=abc"), "scale_par must be a number (got 'abc')"),
    (("--set", "scale_par"), "expected key=value"),
    (("--set", "scale_site=nowhere"), "nowhere"),
    (("--set", "scale_layers=3-1"), "scale_layers"),
    (("--set", "gates=no/such/dir"), "gates=no/such/dir: no such folder"),
    (("--recipe", "no-such-recipe"), "no-such-recipe"),
])
@pytest.mark.parametrize("verb", [PPL, GEN, CMP])
def test_bad_settings_are_one_line_before_the_model_loads(verb, args, needle, monkeypatch, capsys):
    def no_load(*a, **k):
        raise AssertionError("the model was loaded before the settings were checked")

    monkeypatch.setattr("geosteer.eval.cli.load", no_load)
    code, _, err = run_cli(monkeypatch, capsys, *verb, *args)
    one_line_exit_2(code, err)
    assert needle in err


def test_recipe_keys_lists_every_registered_key(monkeypatch, capsys):
    from geosteer.methods import recipe_keys

    rows = _json(monkeypatch, capsys, "recipe", "show", "--keys", "--json")
    assert [r["key"] for r in rows] == list(recipe_keys())
    assert {"key": "scale_par", "method": "directional", "kind": "number", "default": 1.0}.items() <= \
        next(r for r in rows if r["key"] == "scale_par").items()


def test_recipe_save_never_writes_over_a_users_folder(tmp_path, monkeypatch, capsys):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    code, _, err = run_cli(monkeypatch, capsys, "recipe", "save", str(tmp_path / "mine"), "--base-model",
                           "tiny-llama", "--set", "beta_attn=0.5")
    one_line_exit_2(code, err)
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["notes.txt"]
    code, _, err = run_cli(monkeypatch, capsys, "recipe", "save", str(tmp_path / "r"), "--base-model",
                           "tiny-llama", "--set", "nope=1")
    one_line_exit_2(code, err)
    assert not (tmp_path / "r").exists()
