"""Shared helpers of the peer benchmarks: machine line, attention mode switch, interleaved timing."""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable

import torch


def machine(threads: int) -> str:
    return f"{platform.machine()} {os.cpu_count()} cpus, torch {torch.__version__}, threads {threads}"


def set_attention(model, name: str) -> None:
    """``"sdpa"`` (stock HF) or ``"geosteer"`` (the registered function, bit-identical when neutral)."""
    from geosteer.attention import ATTN_NAME, use_geosteer_attention

    if name == "geosteer":
        use_geosteer_attention(model)
        return
    model.set_attn_implementation("sdpa")
    for m in model.modules():
        cfg = getattr(m, "config", None)
        if cfg is not None and getattr(cfg, "_attn_implementation", None) == ATTN_NAME:
            cfg._attn_implementation = "sdpa"


def module_path(model, module) -> str:
    for name, m in model.named_modules():
        if m is module:
            return name
    raise KeyError("module not in model")


def envoy_at(envoy, path: str):
    """Walk an nnsight envoy along a dotted module path (``model.layers.3``)."""
    for part in path.split("."):
        envoy = envoy[int(part)] if part.isdigit() else getattr(envoy, part)
    return envoy


def interleaved(sides: dict[str, tuple[Callable[[], object], Callable[[], None]]],
                repeats: int) -> dict[str, list[float]]:
    """Time each side once per round (A, B, C, A, B, C, ...), after one warm-up round.

    ``sides``: name → (timed callable, untimed set-up run just before it, e.g. the attention mode).
    """
    times: dict[str, list[float]] = {k: [] for k in sides}
    for _ in range(repeats + 1):
        for name, (fn, prepare) in sides.items():
            prepare()
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {k: v[1:] for k, v in times.items()}  # drop the warm-up round


def ratios(times: dict[str, list[float]], base: str) -> dict[str, dict]:
    out = {}
    for name, ts in times.items():
        r = [t / b for t, b in zip(ts, times[base], strict=True)]
        out[name] = {"median_s": statistics.median(ts), "ratio_median": statistics.median(r),
                     "ratio_min": min(r), "ratio_max": max(r), "n": len(r)}
    return out


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def paired(run_a: Callable[[], object], run_b: Callable[[], object], repeats: int,
           clocks: tuple[str, ...] = ("wall",), warmup: bool = True) -> dict[str, dict]:
    """Interleaved A/B timing after one warm-up each (A, B, A, B, ...), per clock (``wall``, ``cpu``).

    ``warmup=False`` when the caller already ran both once (e.g. to check that they agree).
    Returns ``{clock: {"a_s", "b_s" (medians), "ratio" (median of per-pair b/a), "ratio_min",
    "ratio_max", "repeats"}}``.
    """
    if warmup:
        run_a()
        run_b()
    t: dict[str, dict[str, list[float]]] = {c: {"a": [], "b": []} for c in clocks}
    for _ in range(repeats):
        for side, fn in (("a", run_a), ("b", run_b)):
            start = {c: CLOCKS[c]() for c in clocks}
            fn()
            for c in clocks:
                t[c][side].append(CLOCKS[c]() - start[c])
    out = {}
    for c in clocks:
        r = [b / a for a, b in zip(t[c]["a"], t[c]["b"], strict=True)]
        out[c] = {"a_s": statistics.median(t[c]["a"]), "b_s": statistics.median(t[c]["b"]),
                  "ratio": statistics.median(r), "ratio_min": min(r), "ratio_max": max(r),
                  "repeats": repeats}
    return out


def status_mb(field: str) -> float:
    """A memory field of /proc/self/status (VmRSS, VmHWM) in MB (Linux)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def reset_peak_rss() -> float:
    """Reset the kernel's resident-memory high-water mark (model loading has its own, higher peak, which
    would hide a forward's); returns the resident MB now."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return status_mb("VmRSS")


def check_close(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype, label: str) -> float:
    """max |a − b|; AssertionError (fail fast) past 1e-4 in fp32, or past the bf16/fp16 rounding of |b|."""
    err = float((a - b).abs().max())
    tol = 1e-4 if dtype == torch.float32 else 2 ** -7 * max(1.0, float(b.abs().max()))
    if not err <= tol:
        raise AssertionError(f"{label}: max |Δ| {err} > {tol}")
    return err


def padded_batch(dev: torch.device, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random ids (2 × 256 on CUDA, 2 × 24 elsewhere) and an attention mask left-padding the second row by a sixth."""
    n = 256 if dev.type == "cuda" else 24
    ids = torch.randint(10, vocab, (2, n), device=dev)
    mask = torch.ones_like(ids)
    mask[1, : n // 6] = 0
    return ids, mask


def logits_agreement(a: torch.Tensor, b: torch.Tensor, keep: torch.Tensor) -> tuple[float, float, float]:
    """(max |a − b|, its tolerance 0.05·max(1, max|b|/10), share of equal argmaxes) over the kept positions."""
    d = float((a - b)[keep].abs().max())
    tol = 0.05 * max(1.0, float(b.abs().max()) / 10)
    agree = float((a.argmax(-1) == b.argmax(-1))[keep].float().mean())
    return d, tol, agree
