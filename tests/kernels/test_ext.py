"""The compiled CPU kernels (kernels.ext): a build lock left by an interrupted build is cleared, a fresh one
(another process building now) is waited for; a compiler without OpenMP gets the serial build, none the PyTorch
path."""

import os
import threading
import time

from geosteer.kernels import ext


def test_stale_build_lock_is_removed(tmp_path, capsys):
    lock = tmp_path / "lock"
    lock.write_text("")
    old = time.time() - 2 * ext.STALE_LOCK_S
    os.utime(lock, (old, old))
    ext._clear_stale_lock(lock)
    assert not lock.exists()
    assert "interrupted kernel build" in capsys.readouterr().err


def test_fresh_build_lock_is_waited_for(tmp_path):
    lock = tmp_path / "lock"
    lock.write_text("")
    threading.Timer(0.3, lock.unlink).start()  # the other build finishes
    t = time.monotonic()
    ext._clear_stale_lock(lock, poll_s=0.05)
    assert time.monotonic() - t >= 0.25 and not lock.exists()


def test_no_lock_returns_at_once(tmp_path):
    ext._clear_stale_lock(tmp_path / "lock")
    assert not (tmp_path / "lock").exists()


def test_compiled_kernels_fall_back_to_one_thread_then_to_pytorch(monkeypatch):
    """A compiler without OpenMP still gets the (serial) compiled kernels; no compiler gets the PyTorch path."""
    calls = []

    def build(name, sources, functions, omp, **kw):
        calls.append((name, tuple(omp)))
        if omp:
            raise RuntimeError("unsupported option '-fopenmp'")
        return "module"

    monkeypatch.setattr(ext, "build_inline", build)
    monkeypatch.delenv("GEOSTEER_NO_EXT", raising=False)
    kernels = ext.LazyExtension(ext._build_kernels)  # what ext.get/ext.status are bound to
    assert kernels.status() == "not built yet"
    assert kernels.get() == "module" and kernels.get() == "module"
    assert [c[1] for c in calls] == [("-fopenmp",), ()]  # built once
    assert kernels.status().startswith("compiled, one thread (no OpenMP: RuntimeError: unsupported option")

    def no_compiler(*args, **kw):
        raise OSError("no C++ compiler")

    monkeypatch.setattr(ext, "build_inline", no_compiler)
    kernels = ext.LazyExtension(ext._build_kernels)
    assert kernels.get() is None
    assert kernels.status() == "unavailable (OSError: no C++ compiler)"
    monkeypatch.setenv("GEOSTEER_NO_EXT", "1")
    kernels = ext.LazyExtension(ext._build_kernels)
    assert kernels.get() is None and kernels.status() == "unavailable (disabled by GEOSTEER_NO_EXT)"
