"""Student's t for the benchmark's concept-level intervals: the distribution, the interval, the power.

The unit of replication is the concept: a paired difference d_ci (lever A minus lever B on item i of concept
c) is averaged within its concept, m_c = mean_i d_ci, and the C concept means are treated as a sample,

    D = (1/C) * sum_c m_c,   se = sd(m_c) / sqrt(C),   D +- t_{1 - alpha/2, C - 1} * se.

Items of one concept (its prompts and seeds) are not independent draws (they share the concept's judge, lever
texts and stock continuations), so they only sharpen m_c; the degrees of freedom are C - 1, however many items.
The t distribution is computed here in closed form for integer degrees of freedom (Abramowitz & Stegun
26.7.3-4), so the benchmark needs no scipy; the tests check it against ``scipy.stats.t``.
"""

from __future__ import annotations

import math

import numpy as np


def _abs_prob(t: float, df: int) -> float:
    """P(|T| <= t) for t >= 0 and integer df >= 1 (A&S 26.7.3 for odd df, 26.7.4 for even df)."""
    theta = math.atan(t / math.sqrt(df))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2:
        series, term = 0.0, math.cos(theta)
        if df > 1:
            series = term
            for j in range(1, (df - 3) // 2 + 1):
                term *= (2 * j) / (2 * j + 1) * c2
                series += term
        return min(1.0, 2 / math.pi * (theta + s * series))
    series, term = 1.0, 1.0
    for j in range(1, (df - 2) // 2 + 1):
        term *= (2 * j - 1) / (2 * j) * c2
        series += term
    return min(1.0, s * series)


def _check_df(df) -> int:
    if int(df) != df or df < 1:
        raise ValueError(f"degrees of freedom must be a positive integer (got {df})")
    return int(df)


def t_cdf(x: float, df: int) -> float:
    """P(T <= x) for Student's t with integer ``df`` >= 1."""
    df = _check_df(df)
    a = _abs_prob(abs(float(x)), df)
    return 0.5 + 0.5 * a if x >= 0 else 0.5 - 0.5 * a


def t_sf(x: float, df: int) -> float:
    """P(T > x), computed without cancellation in the upper tail."""
    df = _check_df(df)
    a = _abs_prob(abs(float(x)), df)
    return 0.5 * (1 - a) if x >= 0 else 0.5 + 0.5 * a


def t_quantile(p: float, df: int) -> float:
    """The x with P(T <= x) = p (0 < p < 1), by bisection on :func:`t_cdf` to ~1e-12."""
    df = _check_df(df)
    if not 0 < p < 1:
        raise ValueError(f"a quantile needs 0 < p < 1 (got {p})")
    if p < 0.5:
        return -t_quantile(1 - p, df)
    hi = 1.0
    while t_cdf(hi, df) < p:
        hi *= 2
    lo = 0.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def concept_t(diffs: dict[str, np.ndarray], alpha: float = 0.05, null: float = 0.0) -> dict:
    """D, its concept-level t interval at level 1 - alpha and the two-sided p of D = ``null``.

    Returns ``{"mean", "se", "df", "lo", "hi", "p", "n_concepts", "n_items"}``; with fewer than 2 concepts
    se, lo, hi and p are None (no interval without a between-concept spread)."""
    means = np.array([np.asarray(diffs[c], dtype=float).mean() for c in sorted(diffs) if np.size(diffs[c])])
    n_c = int(means.size)
    out = {"mean": float(means.mean()) if n_c else None, "se": None, "df": n_c - 1 if n_c else None, "lo": None,
           "hi": None, "p": None, "n_concepts": n_c, "n_items": int(sum(np.size(x) for x in diffs.values()))}
    if n_c < 2:
        return out
    se = float(means.std(ddof=1) / math.sqrt(n_c))
    q = t_quantile(1 - alpha / 2, n_c - 1)
    gap = out["mean"] - null
    if se > 0:
        p = min(1.0, 2 * t_sf(abs(gap) / se, n_c - 1))
    else:
        p = 0.0 if gap != 0 else 1.0
    out.update(se=se, lo=out["mean"] - q * se, hi=out["mean"] + q * se, p=float(p))
    return out


def detectable(se: float, df: int, alpha: float, power: float = 0.8) -> float:
    """The smallest true difference a two-sided t test at ``alpha`` finds with ``power``:
    (t_{1 - alpha/2, df} + t_{power, df}) * se (the usual shifted-central-t approximation)."""
    return float((t_quantile(1 - alpha / 2, df) + t_quantile(power, df)) * se)
