"""The steering-vectors artifact is schema-checked as surfaces, gates and recipes are: every malformed
folder is one line (load, ``geosteer.load``, ``geosteer show``), before anything is applied to a model."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

import geosteer
from geosteer.errors import ArtifactError, GeosteerError
from geosteer.formats import CONFIG_NAME
from geosteer.models.anatomy import anatomy
from geosteer.models.loading import model_id
from geosteer.vectors import SteeringVectors, import_gguf, load_vectors
from geosteer.vectors.artifact import WEIGHTS_NAME
from tests.cli_helpers import one_line_exit_2, run_cli


@pytest.fixture
def saved(tiny_model, tmp_path):
    model, _ = tiny_model("llama")
    d = anatomy(model).d_model
    g = torch.Generator().manual_seed(0)
    sv = SteeringVectors({0: torch.randn(d, generator=g), 1: torch.randn(d, generator=g)},
                         base_model=model_id(model), d_model=d, n_layers=anatomy(model).n_layers)
    return sv.save(tmp_path / "v")


def _edit_config(folder, **changes):
    doc = json.loads((folder / CONFIG_NAME).read_text())
    doc.update(changes)
    (folder / CONFIG_NAME).write_text(json.dumps(doc))


def _rewrite(folder, tensors):
    save_file(tensors, str(folder / WEIGHTS_NAME))
    _edit_config(folder, sha256=None)  # as if re-signed: the content checks must still catch it


def _refused(folder, model, match):
    for load in (lambda: load_vectors(folder, model), lambda: geosteer.load(folder, model=model)):
        with pytest.raises(ArtifactError, match=match) as e:
            load()
        assert "\n" not in str(e.value)


@pytest.mark.parametrize("value,match", [
    (None, "base_model"), ("", "base_model"), (3, "base_model"), (["tiny-llama"], "base_model"),
    ("tiny-qwen3", "made for base model 'tiny-qwen3'"),
])
def test_base_model_is_required_and_checked(saved, tiny_model, value, match):
    model, _ = tiny_model("llama")
    _edit_config(saved, base_model=value)
    _refused(saved, model, match)
    if isinstance(value, str) and value:
        assert load_vectors(saved, model, force=True).base_model == value


@pytest.mark.parametrize("layers,names,match", [
    ([-1, 0], ["-1", "0"], "layers"),
    ([1, 1], ["1", "01"], "repeat a layer"),
    ([0, 1], ["0", "01"], "named by its index"),
    ([0, 1], ["0", "1", "2"], "unexpected 2"),
])
def test_negative_duplicate_and_misnamed_layers_are_refused(saved, tiny_model, layers, names, match, monkeypatch,
                                                            capsys):
    model, _ = tiny_model("llama")
    t = load_file(str(saved / WEIGHTS_NAME))["0"]
    _rewrite(saved, {n: t.clone() for n in names})
    _edit_config(saved, layers=layers)
    _refused(saved, model, match)
    code, _, err = run_cli(monkeypatch, capsys, "show", str(saved))
    one_line_exit_2(code, err)


def test_wrong_width_is_refused_naming_both(saved, tiny_model):
    model, _ = tiny_model("llama")
    d = anatomy(model).d_model
    _rewrite(saved, {"0": torch.ones(d + 3), "1": torch.ones(d + 3)})
    _refused(saved, model, f"shape \\({d + 3},\\).*d_model {d}")
    _edit_config(saved, d_model=d + 3)  # consistent with itself, not with the model
    _refused(saved, model, f"size {d + 3} do not fit this model \\(d_model {d}\\)")


def test_an_empty_tensor_is_refused(saved, tiny_model):
    model, _ = tiny_model("llama")
    _rewrite(saved, {"0": torch.ones(0), "1": torch.ones(0)})
    _refused(saved, model, "tensor '[01]' is empty")


@pytest.mark.parametrize("damage", ["not_safetensors", "truncated", "changed"])
def test_unreadable_or_half_copied_tensor_files_are_one_line(saved, tiny_model, damage):
    model, _ = tiny_model("llama")
    path = saved / WEIGHTS_NAME
    raw = path.read_bytes()
    if damage == "not_safetensors":
        path.write_text("this is a pickle, honestly")
        _edit_config(saved, sha256=None)
        match = "not a readable safetensors file"
    elif damage == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
        match = "checksum differs"
    else:
        path.write_bytes(raw[:-4] + b"\0\0\0\0")
        match = "checksum differs"
    _refused(saved, model, match)
    if damage == "truncated":
        _edit_config(saved, sha256=None)  # without the checksum the reader still refuses
        _refused(saved, model, "not a readable safetensors file")


def test_saving_vectors_without_a_base_model_is_refused(tmp_path):
    with pytest.raises(ArtifactError, match="no base model"):
        SteeringVectors({0: torch.ones(4)}, d_model=4).save(tmp_path / "v")
    assert not (tmp_path / "v").exists()


def test_identical_pairs_are_refused_before_the_model_loads(tmp_path, monkeypatch, capsys):
    from tests.cli_helpers import forbid_model_builds

    pairs = tmp_path / "pairs.json"
    pairs.write_text(json.dumps([["same", "same"], ["also", "also"]]))
    forbid_model_builds(monkeypatch)
    code, _, err = run_cli(monkeypatch, capsys, "learn", "vectors", "--model", "tiny-llama", "--pairs", str(pairs),
                           "--out", str(tmp_path / "v"))
    one_line_exit_2(code, err)
    assert "same text" in err and not (tmp_path / "v").exists()


def test_a_zero_vector_is_refused_at_extraction(tiny_model):
    from geosteer.vectors import extract

    model, tok = tiny_model("llama")
    with pytest.raises(GeosteerError, match="layer 0 is zero"):
        extract(model, tok, positive=["a b c"], negative=["a b c"], layers="0")


def test_a_gguf_for_another_architecture_is_refused_unless_forced(tiny_model, tmp_path):
    pytest.importorskip("gguf")
    model, _ = tiny_model("llama")
    d = anatomy(model).d_model
    path = SteeringVectors({0: torch.ones(d)}, model_type="gpt2").export_gguf(tmp_path / "v.gguf")
    with pytest.raises(ArtifactError, match="for a 'gpt2' model.*this 'llama' model.*force") as e:
        import_gguf(path, model)
    assert "\n" not in str(e.value)
    with pytest.raises(ArtifactError, match="'gpt2' model.*this 'llama' model"), \
            geosteer.steer(model, import_gguf(path)):  # imported without a model: checked when attached
        pass
    sv = import_gguf(path, model, force=True)
    assert sv.extraction["gguf_model_hint"] == "gpt2"
    with geosteer.steer(model, sv):
        pass
    same = SteeringVectors({0: torch.ones(d)}, model_type="llama").export_gguf(tmp_path / "ok.gguf")
    assert import_gguf(same, model).vectors[0].shape == (d,)
    assert import_gguf(same).model_type == "llama"  # without a model: nothing to check against
