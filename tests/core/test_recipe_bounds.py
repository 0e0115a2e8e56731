"""A recipe folder is self-contained and recorded for one base model: folder keys that leave it (``../x``,
an absolute path, a link out of it or out of the folder it names) are refused in one line before any model
loads, a recipe made for another base model is refused at build as artifacts are (``--force`` overrides),
and booleans or non-finite values where numbers belong are refused."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

from geosteer.errors import ArtifactError, GeosteerError
from geosteer.recipe import InterventionSpec, load_recipe, parse_settings
from tests.cli_helpers import refused_before_load, run_cli

PPL = ("ppl", "-m", "tiny-llama", "--corpus", "heldout", "--max-tokens", "32", "--context", "16",
       "--stride", "16", "--json")


@pytest.fixture(scope="module")
def surfaces(tiny_model, tmp_path_factory):
    import geosteer.manifold as M

    model, _ = tiny_model("llama")
    bank = M.install(model, grid_size=4, grid_range=(-4.0, 4.0))
    M.uninstall(model)
    return M.save(bank, tmp_path_factory.mktemp("bounds") / "surfaces")


@pytest.fixture
def recipe(surfaces, tmp_path):
    return InterventionSpec(surfaces=str(surfaces)).save(tmp_path / "recipe", base_model="tiny-llama")


def _point(recipe, key, value):
    cfg = recipe / "geosteer_config.json"
    doc = json.loads(cfg.read_text())
    doc["interventions"][key] = value
    cfg.write_text(json.dumps(doc))


def _outside(recipe, surfaces, tmp_path):
    """Each way of naming a folder outside the recipe, applied in turn (yields a label)."""
    shutil.rmtree(recipe / "surfaces")
    twin = tmp_path / "elsewhere"
    shutil.copytree(surfaces, twin)
    _point(recipe, "surfaces", "../elsewhere")
    yield "dotdot"
    _point(recipe, "surfaces", str(twin))
    yield "absolute"
    os.symlink(twin, recipe / "surfaces")
    _point(recipe, "surfaces", "surfaces")
    yield "linked folder"
    os.unlink(recipe / "surfaces")
    (recipe / "surfaces").mkdir()
    for p in twin.iterdir():
        os.symlink(p, recipe / "surfaces" / p.name)
    yield "linked files"


def test_folders_outside_the_recipe_are_refused(recipe, surfaces, tmp_path):
    spec, _ = load_recipe(recipe)  # as saved: inside, accepted
    assert spec.surfaces == str(recipe / "surfaces")
    for label in _outside(recipe, surfaces, tmp_path):
        with pytest.raises(ArtifactError, match="outside the recipe folder") as e:
            load_recipe(recipe)
        assert "\n" not in str(e.value), label
        spec, _ = load_recipe(recipe, allow_outside=True)  # the explicit override
        assert spec.surfaces is not None


def test_folders_outside_the_recipe_are_one_line_before_the_model_loads(recipe, surfaces, tmp_path,
                                                                         monkeypatch, capsys):
    for label in _outside(recipe, surfaces, tmp_path):
        line = refused_before_load(monkeypatch, capsys, *PPL, "--recipe", str(recipe))
        assert "outside the recipe folder" in line and "--set surfaces=" in line, label


@pytest.mark.parametrize("value", [7, ["surfaces"], "", {"a": 1}])
def test_folder_values_of_the_wrong_type_are_refused(recipe, value):
    _point(recipe, "surfaces", value)
    with pytest.raises(ArtifactError, match="must name a folder inside the recipe"):
        load_recipe(recipe)


def test_recipe_for_another_base_model_is_refused_unless_forced(recipe, tiny_model):
    model, _ = tiny_model("qwen2")
    spec, _ = load_recipe(recipe)
    with pytest.raises(ArtifactError, match="made for base model 'tiny-llama'"):
        spec.build(model)
    with pytest.raises(ArtifactError, match="made for base model"):  # --set on top keeps the recipe's base
        parse_settings(["edits=scale 0.5"], spec).build(model)


def test_recipe_for_another_base_model_cli(recipe, tiny_model, monkeypatch, capsys):
    import geosteer.cli.common as common

    qwen = tiny_model("qwen2")
    monkeypatch.setattr(common, "load", lambda name, **kw: qwen)
    monkeypatch.setattr("geosteer.eval.cli.load", lambda name, **kw: qwen)
    code, _, err = run_cli(monkeypatch, capsys, *PPL, "--recipe", str(recipe))
    assert code == 2 and err.startswith("error: ") and "made for base model 'tiny-llama'" in err
    assert len(err.strip().splitlines()) == 1


def test_recipe_on_its_own_base_model_builds(recipe, tiny_model):
    model, _ = tiny_model("llama")
    spec, _ = load_recipe(recipe)
    built = spec.build(model)
    assert len(built) == 1


@pytest.mark.parametrize("value", [True, False, "nan", "inf", float("-inf"), "1e999", [1]])
def test_numbers_refuse_booleans_and_non_finite_values(recipe, value):
    _point(recipe, "scale_par", value)
    _point(recipe, "scale_site", "attn_out")
    with pytest.raises(ArtifactError, match="scale_par must be a"):
        load_recipe(recipe)
    with pytest.raises(GeosteerError, match="scale_par must be a"):
        InterventionSpec(scale_site="attn_out", scale_par=value).validate()


def test_set_nan_is_one_line_before_the_model_loads(monkeypatch, capsys):
    line = refused_before_load(monkeypatch, capsys, *PPL, "--set", "scale_par=nan", "--set", "scale_site=attn_out")
    assert "scale_par must be a finite number" in line


def test_numbers_still_accept_numbers():
    spec = InterventionSpec(scale_site="attn_out", scale_par=0, scale_perp="0.5")
    spec.validate()
    assert spec.scale_par == 0.0 and spec.scale_perp == 0.5
    assert torch.isfinite(torch.tensor(spec.scale_par))
