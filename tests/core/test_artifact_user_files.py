"""A save over an existing artifact folder replaces only what geosteer recorded writing there (the ``files``
list of its config, by exact name): a user's own ``*.safetensors``, a nested copy of an older run, notes of
theirs survive, and the write is refused in one line. Checked for every artifact writer and the CLI verbs
that write artifacts in place."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from geosteer.errors import OutputRefused
from geosteer.formats import CONFIG_NAME
from geosteer.models.loading import model_id
from tests.cli_helpers import one_line_exit_2, run_cli
from tests.conftest import random_bank


def _surfaces(model, folder):
    from geosteer import manifold

    return manifold.save(random_bank(model), folder)


def _gates(model, folder):
    from geosteer.dynamics.gates import FFNGates

    return FFNGates.for_model(model, [0, 1]).save(folder)


def _vectors(model, folder):
    from geosteer.models.anatomy import anatomy
    from geosteer.vectors import SteeringVectors

    d = anatomy(model).d_model
    return SteeringVectors({0: torch.ones(d)}, base_model=model_id(model), d_model=d).save(folder)


def _scales(model, folder):
    from geosteer.directional.learned import LearnedScales
    from geosteer.directional.scales_artifact import save_scales

    return save_scales(LearnedScales("resid_post", [0, 1], [0.5, 1.0]), folder, base_model=model_id(model))


def _recipe(model, folder):
    from geosteer.recipe import InterventionSpec

    gates = _gates(model, folder.parent / f"{folder.name}-gates-src")
    return InterventionSpec(gates=str(gates), beta_attn=0.5).save(folder, base_model=model_id(model))


WRITERS = {"surfaces": _surfaces, "gates": _gates, "vectors": _vectors, "scales": _scales, "recipe": _recipe}


def _tree(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("writer", WRITERS)
def test_the_config_records_exactly_what_was_written(writer, tiny_model, tmp_path):
    model, _ = tiny_model("llama")
    folder = WRITERS[writer](model, tmp_path / "a")
    doc = json.loads((folder / CONFIG_NAME).read_text())
    assert doc["files"] == sorted(p.name for p in folder.iterdir())
    assert WRITERS[writer](model, folder) == folder  # geosteer's own folder: replaced


@pytest.mark.parametrize("intruder", ["finetune.safetensors", "older-run", "README.md.bak"])
@pytest.mark.parametrize("writer", WRITERS)
def test_a_user_file_inside_an_artifact_folder_survives(writer, intruder, tiny_model, tmp_path):
    model, _ = tiny_model("llama")
    folder = WRITERS[writer](model, tmp_path / "a")
    if intruder == "older-run":  # a nested copy of an earlier artifact: looks like geosteer's, is the user's
        shutil.copytree(folder, tmp_path / "snapshot")
        shutil.move(tmp_path / "snapshot", folder / intruder)
    else:
        (folder / intruder).write_bytes(b"the user's own weights")
    before = _tree(folder)
    with pytest.raises(OutputRefused, match=f"did not write \\({intruder}") as e:
        WRITERS[writer](model, folder)
    assert "\n" not in str(e.value)
    assert _tree(folder) == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left


def test_a_users_file_in_a_recipes_copied_folder_survives(tiny_model, tmp_path):
    model, _ = tiny_model("llama")
    folder = _recipe(model, tmp_path / "r")
    (folder / "gates" / "notes.txt").write_text("mine")
    with pytest.raises(OutputRefused, match="gates"):
        _recipe(model, folder)
    assert (folder / "gates" / "notes.txt").read_text() == "mine"


def test_an_artifact_without_a_record_replaces_only_its_config(tiny_model, tmp_path):
    """A config that records no files (hand-made, or edited): only the config itself is geosteer's."""
    model, _ = tiny_model("llama")
    folder = _gates(model, tmp_path / "g")
    doc = json.loads((folder / CONFIG_NAME).read_text())
    del doc["files"]
    (folder / CONFIG_NAME).write_text(json.dumps(doc))
    with pytest.raises(OutputRefused, match="gates.safetensors"):
        _gates(model, folder)


@pytest.mark.parametrize("intruder", ["finetune.safetensors", "older-run"])
def test_manifold_edit_in_place_keeps_the_users_files(intruder, tiny_model, tmp_path, monkeypatch, capsys):
    model, _ = tiny_model("llama")
    folder = _surfaces(model, tmp_path / "A")
    if intruder == "older-run":
        shutil.copytree(folder, folder.parent / "copy")
        shutil.move(folder.parent / "copy", folder / intruder)
    else:
        (folder / intruder).write_bytes(b"mine")
    before = _tree(folder)
    code, _, err = run_cli(monkeypatch, capsys, "manifold", "edit", "zero layer=0", "-s", str(folder), "-o",
                           str(folder))
    one_line_exit_2(code, err)
    assert intruder in err and _tree(folder) == before


def test_vectors_train_overwrite_keeps_the_users_files(tiny_model, tmp_path, monkeypatch, capsys):
    model, _ = tiny_model("llama")
    folder = _vectors(model, tmp_path / "A")
    (folder / "finetune.safetensors").write_bytes(b"mine")
    pairs = tmp_path / "pairs.json"
    pairs.write_text(json.dumps([["I love this", "I hate this"], ["great", "awful"]]))
    before = _tree(folder)
    code, _, err = run_cli(monkeypatch, capsys, "learn", "vectors", "--model", "tiny-llama", "--pairs", str(pairs),
                           "--layers", "0", "--out", str(folder), "--overwrite")
    one_line_exit_2(code, err)
    assert "finetune.safetensors" in err and _tree(folder) == before


@pytest.mark.parametrize("verb", ["train", "import"])
def test_manifold_train_and_import_refuse_before_any_work(verb, tiny_model, tmp_path, monkeypatch, capsys):
    from tests.cli_helpers import forbid_model_builds

    model, _ = tiny_model("llama")
    folder = _surfaces(model, tmp_path / "A")
    (folder / "finetune.safetensors").write_bytes(b"mine")
    before = _tree(folder)
    forbid_model_builds(monkeypatch)  # refused while the command line is read, before a model is built
    ckpt = tmp_path / "surfaces_grid8.pt"
    ckpt.write_bytes(b"not read")
    args = (["learn", "surfaces", "--model", "tiny-llama", "--out", str(folder)] if verb == "train" else
            ["manifold", "import", str(ckpt), "--model", "tiny-llama", "--out", str(folder)])
    code, _, err = run_cli(monkeypatch, capsys, *args)
    one_line_exit_2(code, err)
    assert "finetune.safetensors" in err and _tree(folder) == before
