"""A full disk while a verb writes: one line naming what was being written (exit 2), nothing half-written
beside it, no ``<out>.train`` leftovers, and what was there before kept byte for byte.

The disk under the test's output folder is made full by patching the writes geosteer's writers go through
(``os.fdopen`` of the atomic file writer, ``Path.write_text``/``write_bytes``, ``open`` for writing,
safetensors' ``save_file``, which reports the OS error inside its own exception as the real one does): each
raises ``OSError(ENOSPC)`` after a few bytes."""

from __future__ import annotations

import builtins
import errno
import json
import os
import pathlib

import pytest

from tests.cli_helpers import one_line_exit_2, run_cli
from tests.vectors.test_peers import PAIRS

BUDGET = 64  # bytes that fit before the disk is full


class _Full:
    """A file object whose writes stop with ENOSPC once BUDGET bytes went in."""

    def __init__(self, f) -> None:
        self._f, self._left = f, BUDGET

    def write(self, data):
        if len(data) > self._left:
            self._f.write(data[: self._left])
            self._left = 0
            self._f.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._left -= len(data)
        return self._f.write(data)

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


def _under(path, root) -> bool:
    try:
        return pathlib.Path(os.path.realpath(path)).is_relative_to(os.path.realpath(root))
    except (TypeError, ValueError):
        return False


def fill_disk(monkeypatch, root) -> None:
    """From now on, writes under ``root`` run out of space."""
    import safetensors.torch
    from safetensors import SafetensorError

    real_fdopen, real_open = os.fdopen, builtins.open
    real_text, real_bytes, real_save = pathlib.Path.write_text, pathlib.Path.write_bytes, safetensors.torch.save_file

    def fdopen(fd, mode="r", *a, **k):
        f = real_fdopen(fd, mode, *a, **k)
        target = os.readlink(f"/proc/self/fd/{fd}") if isinstance(fd, int) else ""
        return _Full(f) if "w" in mode and _under(target, root) else f

    def open_(file, mode="r", *a, **k):
        f = real_open(file, mode, *a, **k)
        return _Full(f) if isinstance(file, (str, os.PathLike)) and any(c in mode for c in "wax") \
            and _under(file, root) else f

    def write_text(self, data, *a, **k):
        if _under(self, root):
            real_text(self, data[:BUDGET], *a, **k)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real_text(self, data, *a, **k)

    def write_bytes(self, data):
        if _under(self, root):
            real_bytes(self, data[:BUDGET])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real_bytes(self, data)

    def save_file(tensors, filename, metadata=None):
        if _under(filename, root):
            real_bytes(pathlib.Path(filename), b"\0" * BUDGET)
            raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
        return real_save(tensors, filename, metadata=metadata)

    monkeypatch.setattr(os, "fdopen", fdopen)
    monkeypatch.setattr(builtins, "open", open_)
    monkeypatch.setattr(pathlib.Path, "write_text", write_text)
    monkeypatch.setattr(pathlib.Path, "write_bytes", write_bytes)
    monkeypatch.setattr(safetensors.torch, "save_file", save_file)


def _state(root) -> dict:
    """Every file under ``root`` (hidden ones too) with its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def disk(tmp_path):
    d = tmp_path / "disk"
    d.mkdir()
    return d


@pytest.fixture
def surfaces(tiny_model, disk):
    import geosteer.manifold as M

    model, _ = tiny_model("llama")
    bank = M.install(model, grid_size=4, grid_range=(-4.0, 4.0))
    M.uninstall(model)
    return M.save(bank, disk / "A")


def _full_run(monkeypatch, capsys, disk, *args) -> str:
    before = _state(disk)
    fill_disk(monkeypatch, disk)
    code, _, err = run_cli(monkeypatch, capsys, *args)
    monkeypatch.undo()
    lines = err.strip().splitlines()  # training verbs log their steps on stderr first
    one_line_exit_2(code, lines[-1] + "\n")
    assert "Traceback" not in err and "no space left on device" in lines[-1]
    err = lines[-1]
    assert _state(disk) == before  # nothing half-written, no temporary files, nothing lost
    return err


def test_manifold_edit_over_itself(surfaces, disk, monkeypatch, capsys):
    err = _full_run(monkeypatch, capsys, disk, "manifold", "edit", "zero layer=0", "-s", str(surfaces),
                    "-o", str(surfaces))
    assert str(surfaces) in err


def test_manifold_train_checkpoint(disk, monkeypatch, capsys):
    text = disk.parent / "text.txt"
    text.write_text("The river flows through the valley. " * 40)
    out = disk / "trained"
    err = _full_run(monkeypatch, capsys, disk, "learn", "surfaces", "-m", "tiny-llama", "--text", str(text),
                    "--steps", "2", "--checkpoint-every", "1", "--out", str(out), "--threads", "1")
    assert "checkpoint of step" in err and "checkpoint.safetensors" in err and "needs" in err
    assert not out.exists() and not pathlib.Path(str(out) + ".train").exists()  # no leftovers


@pytest.fixture
def vectors(disk, monkeypatch, capsys):
    pairs = disk.parent / "pairs.json"
    pairs.write_text(json.dumps(PAIRS))
    out = disk / "V"
    code, _, err = run_cli(monkeypatch, capsys, "learn", "vectors", "-m", "tiny-llama", "--pairs", str(pairs),
                           "--layers", "1", "--out", str(out))
    assert code == 0, err
    return out, pairs


def test_vectors_train_over_an_artifact(vectors, disk, monkeypatch, capsys):
    out, pairs = vectors
    err = _full_run(monkeypatch, capsys, disk, "learn", "vectors", "-m", "tiny-llama", "--pairs", str(pairs),
                    "--layers", "0", "--out", str(out), "--overwrite")
    assert str(out) in err


def test_show_export_gguf(vectors, disk, monkeypatch, capsys):
    out, _ = vectors
    err = _full_run(monkeypatch, capsys, disk, "show", str(out), "--export", str(disk / "v.gguf"))
    assert str(disk / "v.gguf") in err and "written before the disk filled" in err


def test_compare_out_keeps_the_old_records(disk, monkeypatch, capsys):
    rows = disk / "rows.json"
    rows.write_text('{"meta": {}, "rows": []}\n')
    err = _full_run(monkeypatch, capsys, disk, "compare", "-m", "tiny-llama", "-p", "Hello there",
                    "--max-new-tokens", "2", "--set", "scale_site=attn_out", "--set", "scale_par=0.5",
                    "--out", str(rows))
    assert str(rows) in err and "needs" in err


def test_tasks_build(disk, monkeypatch, capsys):
    err = _full_run(monkeypatch, capsys, disk, "tasks", "build", "-m", "tiny-llama", "--out", str(disk / "T"),
                    "--lengths", "384", "--ruler-n", "2", "--proxy-n", "6")
    assert not (disk / "T").exists() and "no space left" in err


def test_study_report(disk, monkeypatch, capsys):
    md = disk / "report.md"
    md.write_text("the old report\n")
    (disk.parent / "none").mkdir()
    err = _full_run(monkeypatch, capsys, disk, "study", "report", "--results-root", str(disk.parent / "none"),
                    "--out", str(md))
    assert str(md) in err


def test_one_line_errors_of_scripts(capsys):
    from geosteer.errors import one_line_errors

    with pytest.raises(SystemExit) as e, one_line_errors():
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/some/file")
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("error: no space left on device writing /some/file")
    assert len(err.strip().splitlines()) == 1


def test_other_os_errors_are_not_called_a_full_disk():
    from geosteer.errors import is_disk_full

    assert not is_disk_full(OSError(errno.EIO, "I/O error"))
    assert is_disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
