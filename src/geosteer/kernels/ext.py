"""Optional compiled CPU kernels: key features and the query-side epilogue, forward and backward.

Same values as the PyTorch path, in one pass; built on first use from ``csrc/`` (C++ compiler and ninja;
cached under ``$GEOSTEER_CACHE/torch_extensions``), else (or with ``GEOSTEER_NO_EXT=1``) the PyTorch path.
``KeyFeatures`` and ``Epilogue`` are their autograd functions.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import torch

from geosteer.cache import cache_dir

CSRC = Path(__file__).resolve().parent / "csrc"
SOURCES = ("manifold_kernels.cpp", "feature_flash.cpp", "bindings.cpp")  # package data, joined in this order


def _sources() -> list[str]:
    return [(CSRC / name).read_text(encoding="utf-8") for name in SOURCES]


def _build_tag() -> str:
    """A short tag of this interpreter and torch: two environments never share (and invalidate) one build."""
    import hashlib

    key = f"{sys.prefix}|{sys.version_info[:2]}|{torch.__version__}"
    return hashlib.sha256(key.encode()).hexdigest()[:10]


def build_inline(name: str, sources: list[str], functions: list[str] | None, omp: list[str], *,
                 cache: Path | None = None, announce: str | None = None):
    """Compile (or reuse) the C++ ``sources`` as module ``geosteer_<name>`` under ``cache`` (geosteer's cache
    folder by default), one build per interpreter and torch (:func:`_build_tag`); ``announce`` is printed
    before a first build."""
    from torch.utils.cpp_extension import load_inline

    # torch looks for `ninja` on PATH; the `ninja` wheel puts it beside this interpreter, which
    # is not on PATH when .venv/bin/python is run without activating the venv.
    bindir = os.path.dirname(sys.executable)
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    build = (cache or cache_dir()) / "torch_extensions" / f"{name}-{_build_tag()}"
    build.mkdir(parents=True, exist_ok=True)
    _clear_stale_lock(build / "lock")
    if announce and not (build / "build.ninja").exists():
        print(announce, file=sys.stderr, flush=True)
    return load_inline(name=f"geosteer_{name}", cpp_sources=sources, functions=functions,
                       extra_cflags=["-O3", "-march=native", *omp], extra_ldflags=omp,
                       build_directory=str(build), verbose=False)


STALE_LOCK_S = 600.0  # a build takes about a minute (a few on a loaded machine); an older lock is orphaned


def _clear_stale_lock(lock: Path, stale_s: float = STALE_LOCK_S, poll_s: float = 1.0) -> None:
    """Wait for another process's build (torch's lock file in the build folder) and remove the lock if it is
    older than ``stale_s``: an interrupted build leaves it behind, and torch would then wait forever."""
    import time

    while lock.exists():
        try:
            age = time.time() - lock.stat().st_mtime
        except FileNotFoundError:
            return
        if age > stale_s:
            lock.unlink(missing_ok=True)
            print(f"[geosteer] removed the lock of an interrupted kernel build ({age / 60:.0f} min old): {lock}",
                  file=sys.stderr, flush=True)
            return
        time.sleep(poll_s)


class LazyExtension:
    """A compiled module built once per process on first use by ``build(self)``; ``get()`` is None when it
    cannot be built here or ``GEOSTEER_NO_EXT=1``, and ``status()`` says which."""

    def __init__(self, build):
        self.build, self.lock = build, threading.Lock()
        self.tried, self.mod, self.error, self.serial = False, None, None, None

    def get(self):
        if self.tried:
            return self.mod
        with self.lock:
            if not self.tried:
                self.tried = True
                if os.environ.get("GEOSTEER_NO_EXT", "") not in ("", "0"):
                    self.error = "disabled by GEOSTEER_NO_EXT"
                    return None
                try:
                    self.mod = self.build(self)
                except Exception as e:  # noqa: BLE001 - any build problem means: use the PyTorch path
                    self.error, self.mod = error_line(e), None
            return self.mod

    def status(self) -> str:
        """'compiled', 'not built yet', or why the PyTorch path is used."""
        if not self.tried:
            return "not built yet"
        if self.mod is None:
            return f"unavailable ({self.error})"
        return "compiled" if self.serial is None else f"compiled, one thread (no OpenMP: {self.serial})"


def error_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def _build_kernels(lazy: LazyExtension):
    announce = "[geosteer] compiling the attention-surface CPU kernels (one time, ~1 min)..."
    try:
        # -fopenmp: at::parallel_for runs on torch's OpenMP pool (the same libgomp.so.1 that torch loaded);
        # without it the pragma is ignored and these loops run on one thread.
        return build_inline("manifold_v9", _sources(), None, ["-fopenmp"], announce=announce)
    except Exception as e:  # noqa: BLE001 - e.g. a compiler without OpenMP (Apple clang)
        lazy.serial = error_line(e)
        return build_inline("manifold_v9_serial", _sources(), None, [], announce=announce)


_EXT = LazyExtension(_build_kernels)
get, status = _EXT.get, _EXT.status


class KeyFeatures:
    """Autograd wrapper: features (…, D, K+1) of key, value (…, D)."""

    @staticmethod
    def apply(mod, key, value, grid_size, sc, off):
        return _KeyFeaturesFn.apply(key, value, mod, grid_size, sc, off)


class Epilogue:
    """Autograd wrapper: out (B, H, n, D) from attended features o (B, H, n, D, K+1), q, coefficients."""

    @staticmethod
    def apply(mod, o, q, coeff, grid_size, sc, off, with_value):
        return _EpilogueFn.apply(o, q, coeff, mod, grid_size, sc, off, with_value)


class _KeyFeaturesFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, key, value, mod, grid_size, sc, off):
        ctx.save_for_backward(key, value)
        ctx.args = (mod, grid_size, sc, off)
        return mod.key_features(key, value, grid_size, sc, off)

    @staticmethod
    def backward(ctx, gf):
        key, value = ctx.saved_tensors
        mod, grid_size, sc, off = ctx.args
        gk, gv = mod.key_features_backward(key, value, gf, grid_size, sc, off)
        return gk, gv, None, None, None, None


class _EpilogueFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, o, q, coeff, mod, grid_size, sc, off, with_value):
        ctx.save_for_backward(o, q, coeff)
        ctx.args = (mod, grid_size, sc, off, with_value)
        return mod.epilogue(o, q, coeff, grid_size, sc, off, with_value)

    @staticmethod
    def backward(ctx, go):
        o, q, coeff = ctx.saved_tensors
        mod, grid_size, sc, off, with_value = ctx.args
        g_o, g_q, g_c = mod.epilogue_backward(o, q, coeff, go, grid_size, sc, off, with_value)
        return g_o, g_q, g_c, None, None, None, None, None


if __name__ == "__main__":  # `python -m geosteer.kernels.ext`: build now (make setup does), report
    get()
    print(f"[geosteer] attention-surface CPU kernels: {status()}")
