"""Defect-guided parallelisation (paper §4, Eq. (21)–(22), App. C.1 Fig. 6).

x ↦ x + A(x) + Φ(x + A(x)) becomes x + A(x) + Φ(x) (:class:`Parallelize`) on layers chosen low-C_ℓ-first,
randomly or high-C_ℓ-first. Speed-up: estimated from submodule times (a parallel layer costs
max(T_A, T_Φ), Eq. (23)) and measured with :class:`ConcurrentParallel`.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from torch import nn

from geosteer.dynamics.config import STRATEGIES
from geosteer.dynamics.diagnostics import diagnose, metric
from geosteer.dynamics.variants import Parallelize
from geosteer.eval.windows import mean_loss  # also re-exported: it moved to eval.windows
from geosteer.hooks import HookSet, add_hook
from geosteer.models.anatomy import anatomy
from geosteer.models.limits import check_positions


def defect_profile(model: nn.Module, input_ids: torch.Tensor, batch_size: int = 4) -> list[float]:
    """Mean C_ℓ per layer (paper Eq. (22)) from one diagnostics pass."""
    check_positions(model, input_ids.shape[-1], "window length")
    return metric(diagnose(model, input_ids, batch_size=batch_size), "defect")


def layer_order(defects: Sequence[float], strategy: str, seed: int = 0,
                single: Sequence[float] | None = None) -> list[int]:
    """The order in which layers get parallelised: ``low`` / ``high`` C_ℓ first, ``random`` (seeded), or
    ``measured``: ascending single-layer loss increase ``single`` (one held-out evaluation per layer)."""
    n = len(defects)
    if strategy == "measured":
        if single is None or len(single) != n:
            raise ValueError("the 'measured' order needs the single-layer loss increases of every layer")
        return sorted(range(n), key=lambda i: (single[i], i))
    if strategy == "low":
        return sorted(range(n), key=lambda i: (defects[i], i))
    if strategy == "high":
        return sorted(range(n), key=lambda i: (-defects[i], i))
    if strategy == "random":
        return [int(i) for i in np.random.default_rng(seed).permutation(n)]
    raise ValueError(f"unknown selection strategy '{strategy}'; valid: {', '.join(STRATEGIES)}")


def layer_set_key(layers: Sequence[int]) -> str:
    """The key of a set of parallelised layers in a loss cache: sorted, space-separated ("" = stock)."""
    return " ".join(str(i) for i in sorted(set(layers)))


def parallel_curve(model: nn.Module, eval_ids: torch.Tensor, defects: Sequence[float],
                   counts: Sequence[int], seeds: Sequence[int] = (0, 1, 2, 3, 4), batch_size: int = 4,
                   times: list[dict] | None = None, log: Callable[[str], None] | None = None,
                   measured: bool = False, losses: dict[str, float] | None = None,
                   on_loss: Callable[[dict[str, float]], None] | None = None) -> list[dict]:
    """Held-out loss increase vs number of parallelised layers, per strategy (random: one row per seed).

    ``measured``: also parallelise each layer alone (rows of strategy ``single``, with C_ℓ) and trace the
    order by ascending single-layer ΔL (strategy ``measured``). ``losses``: held-out losses already known,
    keyed by :func:`layer_set_key` (reused, and new ones added); ``on_loss(losses)`` after each new one.
    """
    check_positions(model, eval_ids.shape[-1], "window length")
    n_layers = len(defects)
    bad = [c for c in counts if not 0 <= c <= n_layers]
    if bad:
        raise ValueError(f"layer count {bad[0]} out of range 0..{n_layers}")
    cache = losses if losses is not None else {}

    def loss_of(layers: list[int]) -> float:
        key = layer_set_key(layers)
        if key not in cache:
            cache[key] = mean_loss(model, eval_ids, batch_size, (Parallelize(sorted(layers)),) if layers else ())
            if on_loss is not None:
                on_loss(cache)
        return cache[key]

    base = loss_of([])
    rows = []
    plans = [("low", 0), ("high", 0)] + [("random", s) for s in seeds]
    single = None
    if measured:
        single = [loss_of([i]) - base for i in range(n_layers)]
        plans.append(("measured", 0))
    for strategy, seed in plans:
        order = layer_order(defects, strategy, seed, single)
        for c in counts:
            chosen = order[:c]
            loss = loss_of(chosen)
            row = {"strategy": strategy, "seed": seed, "n_parallel": c, "loss": loss, "loss_stock": base,
                   "loss_increase": loss - base, "layers": " ".join(map(str, sorted(chosen)))}
            if times is not None:
                row["speedup_est"] = estimated_speedup(times, chosen)
            rows.append(row)
            if log:
                log(f"{strategy}/{seed} n={c}: ΔL={loss - base:+.4f}")
    if single is not None:
        rows += [{"strategy": "single", "seed": 0, "n_parallel": 1, "layer": i, "defect": float(defects[i]),
                  "loss": base + d, "loss_stock": base, "loss_increase": d, "layers": str(i)}
                 for i, d in enumerate(single)]
    return rows


def defect_predicts_cost(rows: list[dict]) -> dict:
    """Spearman ρ (scipy) between C_ℓ and the single-layer loss increase (rows of strategy ``single``):
    the paper's premise is that a low defect means a cheap parallelisation, i.e. ρ > 0."""
    from scipy.stats import spearmanr

    single = [r for r in rows if r["strategy"] == "single"]
    if len(single) < 3:
        return {}
    res = spearmanr([r["defect"] for r in single], [r["loss_increase"] for r in single])
    return {"spearman_rho": float(res.statistic), "p_value": float(res.pvalue), "layers": len(single)}


def safe_speedup(rows: list[dict], threshold: float = 0.05) -> list[dict]:
    """Per strategy (random: averaged over seeds), the most layers with ΔL ≤ threshold and its speed-up."""
    out = []
    for strategy in STRATEGIES:
        seeds = sorted({r["seed"] for r in rows if r["strategy"] == strategy})
        per_seed = []
        for s in seeds:
            ok = [r for r in rows if r["strategy"] == strategy and r["seed"] == s
                  and r["loss_increase"] <= threshold]
            best = max(ok, key=lambda r: r["n_parallel"]) if ok else None
            per_seed.append(best)
        if not seeds:
            continue
        n_vals = [b["n_parallel"] if b else 0 for b in per_seed]
        sp_vals = [b.get("speedup_est", 1.0) if b else 1.0 for b in per_seed]
        out.append({"strategy": strategy, "threshold": threshold, "seeds": len(seeds),
                    "max_layers": statistics.mean(n_vals), "speedup_est": statistics.mean(sp_vals)})
    return out


@torch.no_grad()
def submodule_times(model: nn.Module, input_ids: torch.Tensor, repeats: int = 5) -> list[dict]:
    """Median wall time per layer of the attention branch (norm + attention) and the FFN branch."""
    an = anatomy(model)
    samples: dict[tuple[int, str], list[float]] = {}
    handles = []
    for b in an.blocks:
        for name, first, last in (("attn", b.attn_norm, b.attn_update), ("ffn", b.mlp_norm, b.mlp_update)):
            t0: list[float] = [0.0]

            def start(mod, args, t0=t0):
                t0[0] = time.perf_counter()

            def stop(mod, args, out, t0=t0, key=(b.index, name)):
                samples.setdefault(key, []).append(time.perf_counter() - t0[0])

            handles.append(first.register_forward_pre_hook(start))
            handles.append(last.register_forward_hook(stop))
    try:
        model(input_ids=input_ids, use_cache=False)  # warm-up
        samples.clear()
        for _ in range(repeats):
            model(input_ids=input_ids, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return [{"layer": b.index, "t_attn": statistics.median(samples[(b.index, "attn")]),
             "t_ffn": statistics.median(samples[(b.index, "ffn")])} for b in an.blocks]


def estimated_speedup(times: list[dict], layers: Sequence[int]) -> float:
    """T_seq / T_par over the blocks' submodules, a parallelised layer costing max(T_A, T_Φ) (Eq. (23))."""
    chosen = set(layers)
    t_seq = sum(t["t_attn"] + t["t_ffn"] for t in times)
    t_par = sum(max(t["t_attn"], t["t_ffn"]) if t["layer"] in chosen else t["t_attn"] + t["t_ffn"]
                for t in times)
    return t_seq / t_par


class ConcurrentParallel:
    """Parallelise ``layers`` and run Φ(x) on a worker thread while attention runs (outputs equal
    :class:`Parallelize` exactly); for timing the real speed-up.
    """

    def __init__(self, layers: Sequence[int]) -> None:
        self.layers = list(layers)

    def attach(self, model: nn.Module) -> Callable[[], None]:
        an = anatomy(model)
        layers = an.check_layers(self.layers)
        pool = ThreadPoolExecutor(max_workers=1)
        hooks = HookSet()
        patched = []
        for layer in layers:
            block = an.blocks[layer]
            slot: dict = {}
            stock_forward = block.mlp.forward

            def submit(x, ctx, block=block, slot=slot, stock_forward=stock_forward):
                slot["fut"] = pool.submit(lambda: stock_forward(block.mlp_norm.forward(x)))
                return None

            def collect(*args, slot=slot, **kwargs):
                return slot.pop("fut").result()

            add_hook(model, "resid_pre", layer, submit, hooks)
            block.mlp.forward = collect
            patched.append(block.mlp)
        hooks.add_handle(Parallelize(layers).attach(model))

        def remove() -> None:
            for mod in patched:
                del mod.forward
            hooks.remove()
            pool.shutdown(wait=True)

        return remove
