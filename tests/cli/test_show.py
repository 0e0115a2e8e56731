"""``geosteer show DIR``: one verb for every artifact format, through the method registry's format table
(surfaces, vectors, gates, learned scales, recipes and a plugin's format); it only reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file

from geosteer.formats import format_of
from geosteer.methods import methods
from tests.cli_helpers import one_line_exit_2, run_cli


@pytest.fixture
def toy(toy_method):
    return toy_method


def _snapshot(folder: Path) -> dict:
    return {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(folder.rglob("*")) if p.is_file()}


def _artifact_folders(method, model, folder: Path) -> list[Path]:
    folder.mkdir(parents=True)
    values = method.examples(model, folder)["active"]
    kinds = {k.name: k.kind for k in method.keys}
    return [Path(v) for k, v in values.items() if kinds.get(k) == "folder" and v is not None]


@pytest.mark.parametrize("name", ["manifold", "directional", "dynamics", "vectors", "toy"])
def test_show_describes_every_format_and_writes_nothing(name, toy, tiny_model, tmp_path, monkeypatch, capsys):
    model, _ = tiny_model("llama")
    folders = _artifact_folders(methods()[name], model, tmp_path / "ex")
    assert folders, f"{name}: no artifact in its examples"
    for folder in folders:
        before = _snapshot(folder)
        code, out, err = run_cli(monkeypatch, capsys, "show", str(folder), "--json")
        assert code == 0, err
        info = json.loads(out)
        assert info["format"] == format_of(folder) and info["artifact"] == str(folder)
        code, text, err = run_cli(monkeypatch, capsys, "show", str(folder))
        assert code == 0 and f"format: {info['format']}" in text, err
        assert _snapshot(folder) == before  # reading only


def test_generic_description_lists_the_tensors_as_stored(tiny_model, tmp_path, monkeypatch, capsys):
    """A format without its own describer (the FFN gates) shows its config and each tensor: shape, dtype and,
    for a small 1-D tensor, its values, equal to the safetensors file read directly."""
    model, _ = tiny_model("llama")
    folder = next(f for f in _artifact_folders(methods()["dynamics"], model, tmp_path / "ex")
                  if format_of(f) == "geosteer-gates")
    code, out, err = run_cli(monkeypatch, capsys, "show", str(folder), "--json")
    assert code == 0, err
    info = json.loads(out)
    stored = load_file(str(next(folder.glob("*.safetensors"))))
    rows = {r["tensor"]: r for r in info["tensors"]}
    assert set(rows) == set(stored)
    for key, t in stored.items():
        assert rows[key]["shape"] == "x".join(map(str, t.shape)) and rows[key]["dtype"] == str(t.dtype)[6:]
        if t.dim() == 1:
            assert rows[key]["values"] == pytest.approx(t.tolist(), abs=1e-6)
    assert info["base_model"] == "tiny-llama"


def test_surfaces_show_lists_shapes_and_the_largest_surfaces(tiny_model, tmp_path, monkeypatch, capsys):
    model, _ = tiny_model("llama")
    folder = _artifact_folders(methods()["manifold"], model, tmp_path / "ex")[0]
    code, out, err = run_cli(monkeypatch, capsys, "show", str(folder), "--json")
    assert code == 0, err
    info = json.loads(out)
    assert info["format"] == "geosteer-surfaces" and info["grid_size"] and info["parameters"] > 0
    assert isinstance(info["top_surfaces"], list) and "history" in info and "wall_regions" in info


def test_a_recipe_folder_shows_its_settings(tmp_path, monkeypatch, capsys):
    code, _, err = run_cli(monkeypatch, capsys, "recipe", "save", str(tmp_path / "r"), "--base-model",
                           "tiny-llama", "--set", "beta_attn=0.5")
    assert code == 0, err
    code, out, err = run_cli(monkeypatch, capsys, "show", str(tmp_path / "r"), "--json")
    assert code == 0, err
    info = json.loads(out)
    assert info["format"] == "geosteer-recipe" and "beta_attn" in json.dumps(info)


@pytest.mark.parametrize("make, needle", [
    (lambda d: d / "missing", "no such folder"),
    (lambda d: (d / "plain").mkdir() or d / "plain", "is not a geosteer artifact"),
    (lambda d: ((d / "odd").mkdir(), (d / "odd" / "geosteer_config.json").write_text('{"format": "geosteer-odd"}'))
     and d / "odd", "unknown artifact format 'geosteer-odd'; known: "),
])
def test_show_refuses_in_one_line(make, needle, tmp_path, monkeypatch, capsys):
    code, _, err = run_cli(monkeypatch, capsys, "show", str(make(tmp_path)))
    one_line_exit_2(code, err)
    assert needle in err


@pytest.mark.parametrize("name, target, needle", [
    ("manifold", "s.gguf", "a geosteer-surfaces artifact cannot be exported as '.gguf'; its exports: none"),
    ("vectors", "v.npz", "a geosteer-vectors artifact cannot be exported as '.npz'; its exports: .gguf"),
])
def test_export_refuses_a_suffix_the_format_does_not_declare(name, target, needle, tiny_model, tmp_path,
                                                             monkeypatch, capsys):
    model, _ = tiny_model("llama")
    folder = next(f for f in _artifact_folders(methods()[name], model, tmp_path / "ex")
                  if format_of(f) == f"geosteer-{'surfaces' if name == 'manifold' else name}")
    before = _snapshot(folder)
    code, _, err = run_cli(monkeypatch, capsys, "show", str(folder), "--export", str(tmp_path / target))
    one_line_exit_2(code, err)
    assert needle in err and not (tmp_path / target).exists() and _snapshot(folder) == before


def test_export_refuses_an_existing_file_before_reading(tmp_path, monkeypatch, capsys):
    (tmp_path / "keep.gguf").write_text("mine")
    code, _, err = run_cli(monkeypatch, capsys, "show", str(tmp_path / "missing"), "--export",
                           str(tmp_path / "keep.gguf"))
    one_line_exit_2(code, err)
    assert "exists" in err and (tmp_path / "keep.gguf").read_text() == "mine"
