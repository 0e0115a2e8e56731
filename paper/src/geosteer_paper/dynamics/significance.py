"""Significance of a difference of means: percentile bootstrap interval and permutation test, paired (the same
units — seeds, prompts — measured twice) or two-sample (different units, e.g. the layers of two models).

The unit is the caller's: every record states it. numpy only; the tests check both against scipy.stats."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from geosteer.errors import GeosteerError


def _arrays(a: Sequence[float], b: Sequence[float], paired: bool) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.ndim != 1 or y.ndim != 1 or min(x.size, y.size) < 2 or not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise GeosteerError("a significance test needs two 1-D samples of >= 2 finite values each")
    if paired and x.size != y.size:
        raise GeosteerError(f"a paired test needs samples of equal length (got {x.size} and {y.size})")
    return x, y


def bootstrap_interval(a: Sequence[float], b: Sequence[float], *, paired: bool, level: float = 0.95,
                       n_boot: int = 10000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of mean(a) − mean(b): resample the paired differences, or each sample
    on its own."""
    x, y = _arrays(a, b, paired)
    rng = np.random.default_rng(seed)
    if paired:
        d = x - y
        stats = d[rng.integers(0, d.size, (n_boot, d.size))].mean(1)
    else:
        stats = (x[rng.integers(0, x.size, (n_boot, x.size))].mean(1)
                 - y[rng.integers(0, y.size, (n_boot, y.size))].mean(1))
    lo, hi = np.quantile(stats, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def permutation_p(a: Sequence[float], b: Sequence[float], *, paired: bool, n_perm: int = 20000,
                  seed: int = 0, exact_max: int = 2 ** 16) -> float:
    """Two-sided permutation p-value of mean(a) − mean(b): sign flips of the paired differences, or
    relabelling of the pooled two samples. Exact when the permutations number at most ``exact_max``."""
    x, y = _arrays(a, b, paired)
    if paired:
        d = x - y
        obs = abs(d.mean())
        if 2 ** d.size <= exact_max:
            signs = np.array(list(itertools.product((1.0, -1.0), repeat=d.size)))
        else:
            signs = np.random.default_rng(seed).choice((1.0, -1.0), (n_perm, d.size))
        null = np.abs((signs * d).mean(1))
        return float((null >= obs - 1e-12 * max(obs, 1.0)).mean())
    pool, n = np.concatenate([x, y]), x.size
    obs = abs(x.mean() - y.mean())
    rng = np.random.default_rng(seed)
    perms = np.array([rng.permutation(pool.size) for _ in range(n_perm)])
    s = pool[perms]
    null = np.abs(s[:, :n].mean(1) - s[:, n:].mean(1))
    return float(((null >= obs - 1e-12 * max(obs, 1.0)).sum() + 1) / (n_perm + 1))


def compare(a: Sequence[float], b: Sequence[float], *, paired: bool, unit: str, level: float = 0.95,
            seed: int = 0) -> dict:
    """One record: means, difference, bootstrap interval, permutation p, n per side and the unit."""
    x, y = _arrays(a, b, paired)
    lo, hi = bootstrap_interval(x, y, paired=paired, level=level, seed=seed)
    return {"unit": unit, "paired": paired, "n_a": int(x.size), "n_b": int(y.size), "mean_a": float(x.mean()),
            "mean_b": float(y.mean()), "diff": float(x.mean() - y.mean()), "ci_level": level, "ci_low": lo,
            "ci_high": hi, "p_permutation": permutation_p(x, y, paired=paired, seed=seed), "seed": seed}
