"""Optional compiled CPU kernels: key features and the query-side epilogue, forward and backward.

Both compute exactly what the PyTorch path in ``kernel.py`` computes (same clamping and basis pieces,
float32), in one pass instead of a dozen element-wise passes. Built on first use from the C++ sources
in ``csrc/`` with ``torch.utils.cpp_extension.load_inline`` (needs a C++ compiler, ninja and the Python
headers; about a minute, cached under ``$GEOSTEER_CACHE/torch_extensions``). When that is not possible, or with
``GEOSTEER_NO_EXT=1``, geosteer uses the PyTorch path (same results, slower). ``KeyFeatures`` and
``Epilogue`` wrap them as autograd functions (gradients for keys, values, queries, attended features and
coefficients), so training uses them too.
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

_lock = threading.Lock()
_state: dict = {"tried": False, "mod": None, "error": None, "serial": None}


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


def _build(cache: Path, name: str, omp: list[str]):
    return build_inline(name, _sources(), None, omp, cache=cache,
                        announce="[geosteer] compiling the attention-surface CPU kernels (one time, ~1 min)...")


def get():
    """The compiled module, or None (not buildable here, or disabled with GEOSTEER_NO_EXT=1)."""
    if _state["tried"]:
        return _state["mod"]
    with _lock:
        if _state["tried"]:
            return _state["mod"]
        _state["tried"] = True
        if os.environ.get("GEOSTEER_NO_EXT", "") not in ("", "0"):
            _state["error"] = "disabled by GEOSTEER_NO_EXT"
            return None
        try:
            try:
                # -fopenmp: at::parallel_for runs on torch's OpenMP pool (the same libgomp.so.1 that torch
                # loaded); without it the pragma is ignored and these loops run on one thread.
                _state["mod"] = _build(cache_dir(), "manifold_v9", ["-fopenmp"])
            except Exception as e:  # noqa: BLE001 - e.g. a compiler without OpenMP (Apple clang)
                _state["mod"] = _build(cache_dir(), "manifold_v9_serial", [])
                _state["serial"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        except Exception as e:  # noqa: BLE001 - any build problem means: use the PyTorch path
            _state["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            _state["mod"] = None
        return _state["mod"]


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


def status() -> str:
    """'compiled', 'not built yet', or why the PyTorch path is used."""
    if not _state["tried"]:
        return "not built yet"
    if _state["mod"] is None:
        return f"unavailable ({_state['error']})"
    return "compiled" if _state["serial"] is None else f"compiled, one thread (no OpenMP: {_state['serial']})"


if __name__ == "__main__":  # `python -m geosteer.kernels.ext`: build now (make setup does), report
    get()
    print(f"[geosteer] attention-surface CPU kernels: {status()}")
