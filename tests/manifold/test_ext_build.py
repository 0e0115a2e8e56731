"""The compiled kernels' build folder (kernels.ext): a lock left by an interrupted build is cleared, a fresh
one (another process building now) is waited for."""

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
