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

    def build(cache, name, omp):
        calls.append((name, tuple(omp)))
        if omp or name == "broken":
            raise RuntimeError("unsupported option '-fopenmp'")
        return "module"

    monkeypatch.setattr(ext, "_state", {"tried": False, "mod": None, "error": None, "serial": None})
    monkeypatch.setattr(ext, "_build", build)
    monkeypatch.delenv("GEOSTEER_NO_EXT", raising=False)
    assert ext.get() == "module"
    assert [c[1] for c in calls] == [("-fopenmp",), ()]
    assert ext.status().startswith("compiled, one thread (no OpenMP: RuntimeError: unsupported option")

    def no_compiler(cache, name, omp):
        raise OSError("no C++ compiler")

    monkeypatch.setattr(ext, "_state", {"tried": False, "mod": None, "error": None, "serial": None})
    monkeypatch.setattr(ext, "_build", no_compiler)
    assert ext.get() is None
    assert ext.status() == "unavailable (OSError: no C++ compiler)"
