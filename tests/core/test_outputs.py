"""Output folders never delete what geosteer did not write (geosteer.outputs), output paths are checked
before any work (geosteer.io_utils.check_output_path), and written files honour the umask."""

from __future__ import annotations

import json
import os
import stat

import pytest
import torch

from geosteer import manifold
from geosteer.errors import GeosteerError, OutputRefused
from geosteer.formats import CONFIG_NAME
from geosteer.io_utils import atomic_write_json, atomic_write_text, check_output_path, write_records
from geosteer.outputs import CONFIG_NAME as OUTPUTS_CONFIG_NAME
from geosteer.outputs import check_output_folder, folder_kind, write_folder_atomic


def _artifact_fill(fmt: str, *extra: str):
    def fill(tmp):
        (tmp / CONFIG_NAME).write_text(json.dumps({"format": fmt, "version": 1}))
        (tmp / "w.safetensors").write_bytes(b"new")
        for name in extra:
            (tmp / name).write_text("new")
    return fill


def _tree(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def victim(tmp_path):
    """An ordinary folder of the user's own files."""
    d = tmp_path / "victim"
    (d / "sub").mkdir(parents=True)
    (d / "thesis.txt").write_text("precious")
    (d / "sub" / "data.csv").write_text("1,2\n")
    return d


def test_config_name_is_the_formats_one():
    assert OUTPUTS_CONFIG_NAME == CONFIG_NAME


@pytest.mark.parametrize("kind", ["geosteer-surfaces", None])
def test_an_ordinary_folder_is_never_replaced(victim, kind):
    before = _tree(victim)
    with pytest.raises(OutputRefused, match="not a geosteer output folder.*thesis.txt"):
        write_folder_atomic(victim, _artifact_fill("geosteer-surfaces"), kind=kind)
    assert _tree(victim) == before
    assert sorted(p.name for p in victim.parent.iterdir()) == ["victim"]  # no temporary folder left


def test_another_kind_of_artifact_is_not_replaced(tmp_path):
    gates = write_folder_atomic(tmp_path / "g", _artifact_fill("geosteer-gates"))
    before = _tree(gates)
    with pytest.raises(OutputRefused, match="is a geosteer-gates artifact.*geosteer-surfaces"):
        write_folder_atomic(gates, _artifact_fill("geosteer-surfaces"), kind="geosteer-surfaces")
    assert _tree(gates) == before
    assert folder_kind(gates) == "geosteer-gates"


def test_same_kind_is_replaced_only_with_overwrite_and_only_without_user_files(tmp_path):
    art = write_folder_atomic(tmp_path / "a", _artifact_fill("geosteer-surfaces", "README.md"))
    with pytest.raises(OutputRefused, match="pass overwrite"):
        write_folder_atomic(art, _artifact_fill("geosteer-surfaces"), overwrite=False)
    write_folder_atomic(art, _artifact_fill("geosteer-surfaces", "new.txt"))  # same kind: replaced
    assert sorted(p.name for p in art.iterdir()) == [CONFIG_NAME, "new.txt", "w.safetensors"]
    (art / "my-notes.txt").write_text("mine")  # the user's file inside an artifact folder
    with pytest.raises(OutputRefused, match="did not write.*my-notes.txt"):
        write_folder_atomic(art, _artifact_fill("geosteer-surfaces"))
    assert (art / "my-notes.txt").read_text() == "mine"


def test_missing_or_empty_folder_is_written_and_kind_comes_from_the_written_folder(tmp_path):
    (tmp_path / "empty").mkdir()
    for name in ("empty", "new/deeper"):
        out = write_folder_atomic(tmp_path / name, _artifact_fill("geosteer-toy"))
        assert folder_kind(out) == "geosteer-toy"
    # without a kind argument the written folder's config names it: same kind replaces, others refuse
    write_folder_atomic(tmp_path / "empty", _artifact_fill("geosteer-toy"))
    with pytest.raises(OutputRefused):
        write_folder_atomic(tmp_path / "empty", _artifact_fill("geosteer-other"))
    # a folder whose fill writes no config at all can only go where nothing is
    with pytest.raises(OutputRefused):
        write_folder_atomic(tmp_path / "empty", lambda t: (t / "x.txt").write_text("x"))


def test_nested_artifacts_and_task_folders_count_as_geosteer_files(tmp_path):
    def recipe(tmp):
        _artifact_fill("geosteer-recipe")(tmp)
        (tmp / "surfaces").mkdir()
        _artifact_fill("geosteer-surfaces")(tmp / "surfaces")

    r = write_folder_atomic(tmp_path / "r", recipe)
    write_folder_atomic(r, recipe)  # its copied-in surfaces folder is geosteer's own
    t = tmp_path / "t"
    t.mkdir()
    (t / "manifest.json").write_text(json.dumps({"format": "geosteer-tasks", "tasks": {"geosteer_x": 2}}))
    for name in ("geosteer_x.jsonl", "geosteer_x.yaml", "utils.py"):
        (t / name).write_text("old")
    (t / "__pycache__").mkdir()  # lm-eval imported utils.py
    check_output_folder(t, "geosteer-tasks")
    (t / "results.json").write_text("{}")
    with pytest.raises(OutputRefused, match="results.json"):
        check_output_folder(t, "geosteer-tasks")


def test_unreadable_or_hostile_configs_are_just_foreign(tmp_path):
    d = tmp_path / "deep"
    d.mkdir()
    (d / CONFIG_NAME).write_text("[" * 100_000 + "]" * 100_000)
    assert folder_kind(d) is None
    with pytest.raises(OutputRefused):
        check_output_folder(d, "geosteer-surfaces")


@pytest.mark.parametrize("make,needle", [
    (lambda p: p.write_text("x"), "is a file, not a folder"),
    (lambda p: (p.parent / "f").write_text("x"), "lies under"),
])
def test_a_file_at_or_above_the_target_is_refused(tmp_path, make, needle):
    target = tmp_path / "out" if "file, not" in needle else tmp_path / "f" / "out"
    make(target if "file, not" in needle else target.parent)
    with pytest.raises(GeosteerError, match=needle):
        write_folder_atomic(target, _artifact_fill("geosteer-surfaces"), kind="geosteer-surfaces")


def test_a_crash_in_fill_keeps_the_previous_artifact(tmp_path):
    art = write_folder_atomic(tmp_path / "a", _artifact_fill("geosteer-surfaces"))
    before = _tree(art)

    def crash(tmp):
        _artifact_fill("geosteer-surfaces")(tmp)
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        write_folder_atomic(art, crash)
    assert _tree(art) == before and sorted(p.name for p in tmp_path.iterdir()) == ["a"]


# ----------------------------------------------------------------------------- output file paths
@pytest.mark.parametrize("rel,kw,needle", [
    ("afile/x.json", {}, "lies under .*afile, which is a file"),
    ("afile/deeper/x.json", {}, "lies under .*afile, which is a file"),
    ("adir", {}, "is a folder; give a file name"),
    ("afile", {"folder": True}, "is a file, not a folder"),
    ("rows.xlsx", {"suffixes": (".json", ".csv")}, r"cannot write a '\.xlsx' file; valid extensions: \.json, \.csv"),
    ("rows", {"suffixes": (".json", ".csv")}, "no extension"),
])
def test_check_output_path_refuses_in_one_line(tmp_path, rel, kw, needle):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "adir").mkdir()
    with pytest.raises(GeosteerError, match=needle) as e:
        check_output_path(tmp_path / rel, what="--out", **kw)
    assert "\n" not in str(e.value) and str(e.value).startswith("--out ")
    assert check_output_path(tmp_path / "new" / "x.JSON", suffixes=(".json",)) == tmp_path / "new" / "x.JSON"


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_check_output_path_refuses_an_unwritable_folder(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(GeosteerError, match="permission denied"):
            check_output_path(ro / "x.json")
    finally:
        ro.chmod(0o700)


def test_write_records_refuses_extensions_it_cannot_write(tmp_path):
    with pytest.raises(GeosteerError, match="valid extensions: .json, .csv"):
        write_records(tmp_path / "rows.xlsx", [{"a": 1}])
    assert list(tmp_path.iterdir()) == []
    assert write_records(tmp_path / "rows.csv", [{"a": 1}]).read_text().splitlines() == ["a", "1"]


# ----------------------------------------------------------------------------- modes (the user's umask)
def _mode(p):
    return stat.S_IMODE(p.stat().st_mode)


@pytest.mark.parametrize("mask,dir_mode,file_mode", [(0o022, 0o755, 0o644), (0o077, 0o700, 0o600),
                                                     (0o002, 0o775, 0o664)])
def test_written_files_and_folders_follow_the_umask(tmp_path, tiny_model, mask, dir_mode, file_mode):
    model, _ = tiny_model("llama")
    bank = manifold.install(model)
    manifold.uninstall(model)
    old = os.umask(mask)
    try:
        art = manifold.save(bank, tmp_path / "art")
        plain = write_folder_atomic(tmp_path / "plain", _artifact_fill("geosteer-toy"))
        j = atomic_write_json(tmp_path / "r.json", {"a": 1})
        rec = write_records(tmp_path / "r.csv", [{"a": 1}])
    finally:
        os.umask(old)
    assert _mode(art) == _mode(plain) == dir_mode
    for f in [*art.iterdir(), *plain.iterdir(), j, rec]:
        assert _mode(f) == file_mode, f


def test_replacing_a_file_keeps_its_mode(tmp_path):
    f = atomic_write_text(tmp_path / "r.txt", "a")
    f.chmod(0o640)
    atomic_write_text(f, "b")
    assert f.read_text() == "b" and _mode(f) == 0o640


def test_surfaces_save_refuses_before_checking_or_writing(tmp_path, tiny_model, victim):
    model, _ = tiny_model("llama")
    bank = manifold.install(model)
    manifold.uninstall(model)
    with torch.no_grad():
        bank.coefficients.fill_(float("nan"))  # would be refused too, but the folder check comes first
    before = _tree(victim)
    with pytest.raises(OutputRefused, match="thesis.txt"):
        manifold.save(bank, victim)
    assert _tree(victim) == before


def test_gates_and_recipe_savers_never_replace_a_folder_of_user_files(tmp_path, tiny_model, victim):
    from geosteer.dynamics.gates import FFNGates
    from geosteer.recipe import InterventionSpec, save_recipe

    model, _ = tiny_model("llama")
    before = _tree(victim)
    with pytest.raises(OutputRefused, match="thesis.txt"):
        FFNGates.for_model(model, [0]).save(victim)
    with pytest.raises(OutputRefused, match="thesis.txt"):
        save_recipe(victim, InterventionSpec(), base_model="tiny-llama")
    assert _tree(victim) == before
    gates = FFNGates.for_model(model, [0]).save(tmp_path / "g")
    with pytest.raises(OutputRefused, match="geosteer-gates"):  # a recipe is not written over gates
        save_recipe(gates, InterventionSpec(), base_model="tiny-llama")
    with pytest.raises(OutputRefused, match="pass overwrite"):
        FFNGates.for_model(model, [0]).save(gates, overwrite=False)
    assert FFNGates.for_model(model, [0, 1]).save(gates) == gates  # same kind, overwrite: replaced


def test_gguf_export_follows_the_umask(tmp_path):
    pytest.importorskip("gguf")
    from geosteer.vectors.apply import SteeringVectors

    sv = SteeringVectors(vectors={0: torch.ones(4), 1: torch.zeros(4)}, model_type="llama")
    old = os.umask(0o022)
    try:
        path = sv.export_gguf(tmp_path / "v.gguf")
    finally:
        os.umask(old)
    assert _mode(path) == 0o644 and sorted(p.name for p in tmp_path.iterdir()) == ["v.gguf"]
    (tmp_path / "afile").write_text("x")
    with pytest.raises(GeosteerError, match="lies under"):
        sv.export_gguf(tmp_path / "afile" / "v.gguf")
