"""Artifact configs are typed and bounded on read: every malformed field is one line naming it, for the library,
the CLI and the studio alike; the base-model check cannot be bypassed by removing a copy of the field."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch

from geosteer import manifold
from geosteer.config_schema import MAX_DEPTH, parse_config_text
from geosteer.errors import ArtifactError, GeosteerError
from tests.cli_helpers import one_line_exit_2, run_cli


@pytest.fixture(scope="module")
def llama(tiny_model):
    return tiny_model("llama")


@pytest.fixture(scope="module")
def good(llama, tmp_path_factory):
    model, _ = llama
    bank = manifold.install(model, grid_size=4)
    manifold.uninstall(model)
    with torch.no_grad():
        bank.coefficients.normal_(0, 0.1, generator=torch.Generator().manual_seed(0))
    return manifold.save(bank, tmp_path_factory.mktemp("good") / "s")


def _variant(good, tmp_path, edit=None, text=None):
    """A copy of the good artifact with its config changed (``edit(doc)``) or replaced by ``text``."""
    import shutil

    folder = tmp_path / "v"
    shutil.copytree(good, folder)
    cfg = folder / "geosteer_config.json"
    if text is None:
        doc = json.loads(cfg.read_text())
        edit(doc)
        text = json.dumps(doc)
    cfg.write_text(text)
    return folder


def _set(key, value):
    def edit(doc):
        where = doc
        *path, last = key.split(".")
        for p in path:
            where = where[p]
        if value is _DELETE:
            del where[last]
        else:
            where[last] = value
    return edit


_DELETE = object()

CASES = [  # (name, edit, what the one line must name)
    ("version-2.9", _set("version", 2.9), "version must be an integer"),
    ("version-true", _set("version", True), "version must be an integer"),
    ("version-inf", _set("version", float("inf")), "version must be an integer"),
    ("grid-inf", _set("config.grid_size", float("inf")), "config.grid_size"),
    ("grid-float", _set("config.grid_size", 4.0), "config.grid_size"),
    ("meta-list", _set("meta", [1, 2]), "meta"),
    ("meta-training-str", _set("meta", {"training": "abc"}), "meta.training"),
    ("meta-heldout-str", _set("meta", {"training": {"heldout": {"ppl_before": "3"}}}), "ppl_before"),
    ("meta-heldout-half", _set("meta", {"training": {"heldout": {"ppl_before": 3.0, "ppl_after": None}}}),
     "without ppl_after"),
    ("meta-command-int", _set("meta", {"command": 7}), "meta.command"),
    ("config-list", _set("config", [1, 2]), "config"),
    ("config-missing", _set("config", _DELETE), "config"),
    ("layers-huge", _set("layers", [0, 1, 1e30]), "layers"),
    ("layers-dup", _set("layers", [0, 0, 0]), "repeat a layer"),
    ("layers-float", _set("layers", [0.5, 1.7, 2.2]), "layers"),
    ("layers-str", _set("layers", "012"), "layers"),
    ("layers-unsorted", _set("layers", [1, 0, 2]), "increasing order"),
    ("layers-outside", _set("layers", [0, 1, 7]), "the model has layers 0..2"),
    ("history-str", _set("history", "abc"), "history"),
    ("history-ints", _set("history", [1, 2]), "history"),
    ("range-inf", _set("config.grid_range", [float("-inf"), 4.0]), "config.grid_range"),
    ("base-missing", _set("base_model", _DELETE), "base_model"),
    ("base-differs", _set("base_model", "tiny-qwen3"), "config.base_model"),
    ("sha-missing", _set("sha256", _DELETE), "sha256"),
]


@pytest.mark.parametrize("name,edit,match", CASES, ids=[c[0] for c in CASES])
def test_malformed_config_is_one_line_naming_the_field(good, tmp_path, name, edit, match):
    folder = _variant(good, tmp_path, edit)
    with pytest.raises(ArtifactError, match=match) as ei:
        manifold.read_config(folder)
    assert len(str(ei.value).splitlines()) == 1 and str(folder) in str(ei.value)
    with pytest.raises(ArtifactError, match=match):
        manifold.load(folder)


def test_config_nested_100000_deep_is_one_line(good, tmp_path):
    deep = '{"format": "geosteer-surfaces", "meta": ' + "[" * 100_000 + "]" * 100_000 + "}"
    folder = _variant(good, tmp_path, text=deep)
    with pytest.raises(ArtifactError, match="nested deeper than") as ei:
        manifold.read_config(folder)
    assert len(str(ei.value).splitlines()) == 1
    from geosteer.formats import format_of

    assert format_of(folder) is None  # listings see "not an artifact", never a RecursionError


def test_depth_bound_is_exact():
    ok = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert parse_config_text(ok, "x") is not None
    with pytest.raises(ArtifactError, match="nested deeper"):
        parse_config_text("[" + ok + "]", "x")


def test_base_model_only_at_top_level_is_still_checked(llama, good, tmp_path):
    """Removing config.base_model and naming another model at the top level (what `geosteer show` prints)
    does not bypass the other-model check."""
    def edit(doc):
        del doc["config"]["base_model"]
        doc["base_model"] = "tiny-qwen3"

    folder = _variant(good, tmp_path, edit)
    model, _ = llama
    with pytest.raises(ArtifactError, match="made for base model 'tiny-qwen3', not for 'tiny-llama'"):
        manifold.load(folder, model=model)


def test_cli_show_and_ppl_refuse_in_one_line(monkeypatch, capsys, good, tmp_path):
    for i, (_name, edit, _) in enumerate(CASES[:12]):
        folder = _variant(good, tmp_path / str(i), edit)
        code, _, err = run_cli(monkeypatch, capsys, "show", str(folder), "--json")
        one_line_exit_2(code, err)
    folder = _variant(good, tmp_path / "dup", _set("layers", [0, 0, 0]))
    code, _, err = run_cli(monkeypatch, capsys, "ppl", "-m", "tiny-llama", "--corpus", "heldout", "--max-tokens",
                           "64", "--context", "32", "--stride", "16", "--surfaces", str(folder))
    one_line_exit_2(code, err)
    assert "repeat a layer" in err


@pytest.fixture(scope="module")
def gates_dir(llama, tmp_path_factory):
    from geosteer.dynamics.gates import FFNGates

    model, _ = llama
    return FFNGates.for_model(model).save(tmp_path_factory.mktemp("g") / "gates")


GATE_CASES = [("version-2.9", _set("version", 2.9), "version must be an integer"),
              ("layers-dup", _set("layers", [0, 0, 1]), "repeat a layer"),
              ("layers-outside", _set("layers", [0, 1, 5]), "the model has layers 0..2"),
              ("n-layers-inf", _set("n_layers", float("inf")), "n_layers"),
              ("base-missing", _set("base_model", _DELETE), "base_model"),
              ("extra-list", _set("extra", [1]), "extra")]


@pytest.mark.parametrize("name,edit,match", GATE_CASES, ids=[c[0] for c in GATE_CASES])
def test_gates_config_is_checked(gates_dir, tmp_path, name, edit, match):
    from geosteer.dynamics.gates import load_gates

    folder = _variant(gates_dir, tmp_path, edit)
    with pytest.raises(ArtifactError, match=match) as ei:
        load_gates(folder)
    assert len(str(ei.value).splitlines()) == 1


def test_gates_with_changed_weights_are_refused_by_their_checksum(gates_dir, tmp_path):
    import shutil

    from safetensors.torch import save_file

    from geosteer.dynamics.gates import WEIGHTS_NAME, load_gates

    folder = tmp_path / "flipped"
    shutil.copytree(gates_dir, folder)
    save_file({"alpha": torch.tensor([1.0, 1.0, 1.5])}, str(folder / WEIGHTS_NAME))
    with pytest.raises(ArtifactError, match="checksum differs"):
        load_gates(folder)


def test_gates_whose_forward_overflows_are_refused(llama, gates_dir, tmp_path):
    import shutil

    from safetensors.torch import save_file

    from geosteer.dynamics.gates import WEIGHTS_NAME, load_gates

    model, _ = llama
    folder = tmp_path / "huge"
    shutil.copytree(gates_dir, folder)
    save_file({"alpha": torch.full((3,), 3e38)}, str(folder / WEIGHTS_NAME))
    doc = json.loads((folder / "geosteer_config.json").read_text())
    doc["sha256"] = hashlib.sha256((folder / WEIGHTS_NAME).read_bytes()).hexdigest()  # a consistent artifact
    (folder / "geosteer_config.json").write_text(json.dumps(doc))
    with pytest.raises(GeosteerError, match="overflow the model's forward"):
        load_gates(folder, model)
    assert load_gates(gates_dir, model).alpha.detach().eq(1.0).all()


@pytest.mark.parametrize("edit,match", [(_set("interventions", [1, 2]), "interventions"),
                                        (_set("version", 1.5), "version must be an integer"),
                                        (_set("base_model", _DELETE), "base_model")])
def test_recipe_config_is_checked(tmp_path, edit, match):
    from geosteer.recipe import InterventionSpec, load_recipe, save_recipe

    good = save_recipe(tmp_path / "r", InterventionSpec(mlp_variant="radial", mlp_layers=1), base_model="tiny-llama")
    folder = _variant(good, tmp_path / "bad", edit)
    with pytest.raises(ArtifactError, match=match) as ei:
        load_recipe(folder)
    assert len(str(ei.value).splitlines()) == 1


def test_recipe_edits_file_nested_deep_is_one_line(tmp_path):
    from geosteer.manifold.method import edit_list

    f = tmp_path / "edits.json"
    f.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(GeosteerError, match="nested deeper") as ei:
        edit_list(str(f))
    assert len(str(ei.value).splitlines()) == 1
    f.write_text('["zero layer=0"]')
    assert edit_list(str(f)) == ["zero layer=0"]
