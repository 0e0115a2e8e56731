"""The "how to add a method" walkthrough of docs/ARCHITECTURE.md, followed step by step (issue 12).

A toy method — scale the residual stream after layer 0 — registers itself from this test file, without
touching any central file, and appears in the recipe keys, the ``geosteer`` command and the artifacts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
import typer

import geosteer
from geosteer.artifacts import ArtifactFormat, is_artifact, load_artifact, write_folder_atomic
from geosteer.interventions import HookIntervention, steer
from geosteer.methods import Method, RecipeKey, methods, register_method, unregister_method
from geosteer.recipe import InterventionSpec, load_recipe, save_recipe


# -- step 1: the intervention (anything with attach(model) -> remove) -----------------------------------
def toy_scale(factor: float, layers=(0,)) -> HookIntervention:
    return HookIntervention("resid_post", lambda x, ctx: x * factor, list(layers))


# -- step 2: the artifact format ------------------------------------------------------------------------
def save_toy(folder: Path, factor: float) -> Path:
    from safetensors.torch import save_file

    def fill(tmp: Path) -> None:
        (tmp / "geosteer_config.json").write_text(json.dumps({**TOY_FORMAT.header(), "note": "toy"}))
        save_file({"factor": torch.tensor([factor])}, str(tmp / "toy.safetensors"))
        (tmp / "README.md").write_text(TOY_FORMAT.card(base_model="tiny-llama", summary="A toy."))

    return write_folder_atomic(folder, fill)


def load_toy(folder: Path, model=None) -> HookIntervention:
    from safetensors.torch import load_file

    TOY_FORMAT.read(folder)  # version gate, unknown keys warned
    return toy_scale(float(load_file(str(folder / "toy.safetensors"))["factor"]))


TOY_FORMAT = ArtifactFormat("geosteer-toy", 1, tensors=("toy.safetensors",), known_keys=("note",),
                            load=load_toy, method="toy")


# -- step 3: the CLI ----------------------------------------------------------------------------------------
def register_cli(app: typer.Typer) -> None:
    from geosteer.cli.common import JSON_OPT, emit

    @app.command("toy")
    def toy_cmd(factor: float = typer.Option(2.0, "--factor"), as_json: bool = JSON_OPT) -> None:
        """Toy method: scale the residual stream after layer 0."""
        if factor <= 0:
            raise ValueError(f"--factor must be > 0 (got {factor})")
        emit({"factor": factor}, as_json)


# -- step 4: register (what the package's method.py does on import) ---------------------------------------
def build(model, values: dict) -> list:
    return [] if values["toy_factor"] == 1.0 else [toy_scale(values["toy_factor"])]


@pytest.fixture
def toy():
    method = register_method(Method(
        name="toy", summary="scale the residual stream after layer 0",
        keys=(RecipeKey("toy_factor", 1.0, "factor on layer 0's output", kind="number"),),
        build=build, cli=register_cli, artifacts=(TOY_FORMAT,)))
    yield method
    unregister_method("toy")


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
    assert [type(iv).__name__ for iv in ivs] == ["FFNVariant", "HookIntervention"]  # built-ins first
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
