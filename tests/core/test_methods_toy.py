"""The "how to add a method" walkthrough of docs/ARCHITECTURE.md, followed step by step.

A toy method (tests/core/toy_method: scale the residual stream after some layers) registers itself without
touching any central file, and appears in the recipe keys, the ``geosteer`` command and the artifacts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

import geosteer
from geosteer.interventions import HookIntervention, steer
from geosteer.methods import Method, RecipeKey, is_artifact, load_artifact, methods, register_method, unregister_method
from geosteer.recipe import InterventionSpec, load_recipe, save_recipe


def toy_scale(factor: float, layers=(0,)) -> HookIntervention:
    """The toy's formula by hand (the independent reference)."""
    return HookIntervention("resid_post", lambda x, ctx: x * factor, list(layers))


@pytest.fixture
def toy(toy_method):
    """The toy method (steps 1-4 of the walkthrough), registered for one test."""
    return toy_method


def save_toy(folder: Path, factor: float) -> Path:
    from tests.core.toy_method import ToyScale

    return ToyScale(factor, [0], "tiny-llama").save(folder)


def _logits(model, *ivs):
    ids = torch.arange(1, 9)[None]
    with torch.no_grad(), steer(model, *ivs):
        return model(input_ids=ids).logits


def test_toy_method_in_the_registry_and_recipes(toy, tmp_path):
    model, _ = geosteer.load_model("tiny-llama")
    assert "toy" in methods() and methods()["manifold"].name == "manifold"
    spec = InterventionSpec.from_dict({"toy_factor": "0.5", "mlp_variant": "radial", "mlp_layers": 1})
    assert spec.toy_factor == 0.5  # number keys are validated as floats
    ivs = spec.build(model)
    assert [type(iv).__name__ for iv in ivs] == ["FFNVariant", "ToyScale"]  # built-ins first
    # independent reference: the same two interventions made by hand
    from geosteer.dynamics import FFNVariant

    ref = _logits(model, FFNVariant("radial", [1]), toy_scale(0.5))
    torch.testing.assert_close(_logits(model, *ivs), ref)
    assert not torch.allclose(ref, _logits(model))
    folder = save_recipe(tmp_path / "r", spec, base_model="tiny-llama")
    loaded, doc = load_recipe(folder)
    assert doc["interventions"]["toy_factor"] == 0.5 and loaded == spec
    assert "toy_factor" in (folder / "README.md").read_text()
    with pytest.raises(geosteer.errors.GeosteerError, match="toy_factor must be a number"):
        InterventionSpec.from_dict({"toy_factor": "half"})
    with pytest.raises(ValueError, match="already taken: toy_factor"):
        register_method(Method("toy2", keys=(RecipeKey("toy_factor"),)))


def test_toy_method_artifacts(toy, tmp_path):
    model, _ = geosteer.load_model("tiny-llama")
    folder = save_toy(tmp_path / "t", 3.0)
    assert is_artifact(folder) and is_artifact(folder, "geosteer-toy") and not is_artifact(folder, "geosteer-gates")
    (folder / "toy.safetensors").rename(folder / "moved")
    assert not is_artifact(folder)  # its format needs the tensor file
    (folder / "moved").rename(folder / "toy.safetensors")
    iv = load_artifact(folder, model)
    torch.testing.assert_close(_logits(model, iv), _logits(model, toy_scale(3.0)))
    doc = json.loads((folder / "geosteer_config.json").read_text())
    for bad, field in (({"base_model": ""}, "base_model"), ({"layers": [-1]}, "layers")):
        (folder / "geosteer_config.json").write_text(json.dumps({**doc, **bad}))
        with pytest.raises(geosteer.errors.ArtifactError, match=field):  # the format's own schema
            load_artifact(folder, model)
    (folder / "geosteer_config.json").write_text(json.dumps(doc))
    # the built-in formats go through the same dispatch
    from geosteer.manifold import install, save

    m2, _ = geosteer.load_model("tiny-llama")
    bank = load_artifact(save(install(m2, grid_size=4), tmp_path / "s"), model)
    assert type(bank).__name__ == "SurfaceBank"
    unregister_method("toy")
    with pytest.raises(geosteer.errors.ArtifactError, match="no loader for format 'geosteer-toy'"):
        load_artifact(folder, model)


def test_toy_method_in_the_cli(toy, monkeypatch, capsys):
    from geosteer import cli

    def run(*argv):
        monkeypatch.setattr(sys, "argv", ["geosteer", *argv])
        try:
            cli.main()
        except SystemExit as e:
            return e.code or 0, capsys.readouterr()
        return 0, capsys.readouterr()

    code, out = run("toy", "--factor", "1.5", "--json")
    assert code == 0 and json.loads(out.out) == {"factor": 1.5}
    code, out = run("toy", "--factor", "-1")
    assert code == 2 and out.err.strip() == "error: --factor must be > 0 (got -1.0)"
    code, out = run("--help")
    assert code == 0 and "toy" in out.out and "Toy method" in out.out


def test_the_toy_verb_is_gone_after_the_toy_test():
    from tests.cli_helpers import command_leaves

    assert "toy" not in command_leaves()
