"""An artifact of one method given where a recipe is expected (``--recipe DIR``, ``load_recipe``) is the recipe
of that artifact alone: a surfaces folder is ``surfaces=<folder>``, a steering-vectors folder ``vectors=``."""

from __future__ import annotations

import pytest

from geosteer import manifold
from geosteer.recipe import InterventionSpec, load_recipe
from geosteer.vectors import extract


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tiny_model):
    model, tok = tiny_model("llama")
    root = tmp_path_factory.mktemp("artifacts")
    bank = manifold.install(model)
    manifold.uninstall(model)
    surfaces = manifold.save(bank, root / "s")
    vectors = extract(model, tok, [["good day", "bad day"], ["I love it", "I hate it"]], layers=[1]).save(root / "v")
    recipe = InterventionSpec(surfaces=str(surfaces), edits="zero layer=0").save(root / "r", base_model="tiny-llama")
    return {"surfaces": surfaces, "vectors": vectors, "recipe": recipe}


@pytest.mark.parametrize("key", ["surfaces", "vectors"])
def test_an_artifact_is_the_recipe_of_itself(folders, key):
    spec, doc = load_recipe(folders[key])
    assert spec.changed() == {key: str(folders[key])} and doc["interventions"] == {key: str(folders[key])}


def test_a_recipe_is_still_read_as_a_recipe(folders):
    spec, doc = load_recipe(folders["recipe"])
    assert doc["format"] == "geosteer-recipe" and spec.changed()["edits"]


def test_recipe_option_with_an_artifact_equals_its_own_option(monkeypatch, capsys, folders):
    from tests.cli_helpers import run_cli

    args = ["generate", "-m", "tiny-llama", "-p", "Hello there", "--max-new-tokens", "4"]
    _, by_recipe, err = run_cli(monkeypatch, capsys, *args, "--recipe", str(folders["vectors"]),
                                "--set", "vector_scale=8")
    _, by_key, _ = run_cli(monkeypatch, capsys, *args, "--set", f"vectors={folders['vectors']}",
                           "--set", "vector_scale=8")
    _, stock, _ = run_cli(monkeypatch, capsys, *args)
    assert by_recipe == by_key != stock, err
