"""Operating points matched on control KL: the strength at which a lever's control KL reaches a target.

``kl_at(s)`` is the lever's mean control KL(P_stock || P_s) at strength s, assumed non-decreasing in s with
kl_at(0) = 0 (the stock model, never evaluated). :func:`bisect_strength` brackets the target by doubling or
halving from ``s_start``, then bisects, and returns the evaluated point whose KL is closest to the target.
Every strength is evaluated at most once (:func:`match_levels` shares the memo between targets).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

_MAX_STEPS = 400  # loop guard when a shared memo makes probes free


class _Probe:
    """kl_at behind a memo; counts fresh evaluations and records the points one search consulted."""

    def __init__(self, kl_at: Callable[[float], float], memo: dict[float, float]):
        self.kl_at, self.memo = kl_at, memo
        self.fresh = 0
        self.steps = 0
        self.seen: list[tuple[float, float]] = []

    def __call__(self, s: float) -> float:
        s = float(s)
        self.steps += 1
        if s not in self.memo:
            kl = float(self.kl_at(s))
            if math.isnan(kl):
                raise ValueError(f"kl_at({s}) is NaN")
            self.memo[s] = kl
            self.fresh += 1
        if all(s != t for t, _ in self.seen):
            self.seen.append((s, self.memo[s]))
        return self.memo[s]


def _bracket(probe: _Probe, target: float, s_start: float, s_max: float, floor: float, budget: Callable[[], bool],
             done: Callable[[float], bool]) -> tuple[float, float | None, bool]:
    """(lo, hi, hit): kl(lo) < target <= kl(hi) (lo = 0 when even ``floor`` is above); hi None if s_max is
    below the target; hit when a probe already landed within tolerance."""
    s = s_start
    kl = probe(s)
    if done(kl):
        return s, s, True
    if kl < target:
        lo = s
        while s < s_max and budget():
            s = min(2 * s, s_max)
            kl = probe(s)
            if done(kl):
                return s, s, True
            if kl >= target:
                return lo, s, False
            lo = s
        return lo, None, False
    hi = s
    while s > floor and budget():
        s = max(s / 2, floor)
        kl = probe(s)
        if done(kl):
            return s, s, True
        if kl < target:
            return s, hi, False
        hi = s
    return 0.0, hi, False


def bisect_strength(kl_at: Callable[[float], float], target: float, s_max: float = 64.0, s_start: float = 1.0,
                    tol: float = 0.05, max_evals: int = 24, memo: dict[float, float] | None = None) -> dict:
    """Strength s in (0, s_max] with |kl_at(s) - target| <= tol * target, by bracketing then bisection.

    The bracket [lo, hi] with kl(lo) < target <= kl(hi) is halved at (lo + hi) / 2; the search stops at
    tolerance or after ``max_evals`` fresh evaluations (memo hits are free). Returns
    ``{"strength", "kl", "target", "evals": [(s, kl), ...], "reached", "converged"}``: the evaluated point
    closest to the target (curves are noisy); reached is False when kl(s_max) stays below the target, and
    then strength = s_max with its KL. ``memo`` (s -> KL) may be shared between calls."""
    if not target > 0:
        raise ValueError(f"target must be > 0, got {target}")
    if not (s_max > 0 and s_start > 0):
        raise ValueError("s_max and s_start must be > 0")
    probe = _Probe(kl_at, {} if memo is None else memo)
    s_start = min(s_start, s_max)

    def budget() -> bool:
        return probe.fresh < max_evals and probe.steps < _MAX_STEPS

    def done(kl: float) -> bool:
        return abs(kl - target) <= tol * target

    lo, hi, hit = _bracket(probe, target, s_start, s_max, s_start / 1024, budget, done)
    if hi is None:
        reached = s_max in probe.memo
        s = s_max if reached else max(t for t, _ in probe.seen)
        return {"strength": s, "kl": probe.memo[s], "target": target, "evals": probe.seen, "reached": False,
                "converged": done(probe.memo[s])}
    while not hit and budget():
        mid = (lo + hi) / 2  # the bracket spans at most 2x (doubling/halving), or [0, floor]: no geometric step
        if not lo < mid < hi:  # the bracket is below float resolution
            break
        kl = probe(mid)
        hit = done(kl)
        if kl < target:
            lo = mid
        else:
            hi = mid
    s, kl = min(probe.seen, key=lambda p: (abs(p[1] - target), p[0]))
    return {"strength": s, "kl": kl, "target": target, "evals": probe.seen, "reached": True, "converged": done(kl)}


def level_key(target: float) -> str:
    """The name of a KL level: 0.05 -> "0.05", 0.2 -> "0.2"."""
    return f"{target:g}"


def match_levels(kl_at: Callable[[float], float], targets: Sequence[float], **kw) -> dict[str, dict]:
    """:func:`bisect_strength` for each target, sharing one memo; keyed by :func:`level_key`."""
    memo: dict[float, float] | None = kw.pop("memo", None)
    if memo is None:
        memo = {}
    out: dict[str, dict] = {}
    for t in targets:
        key = level_key(t)
        if key in out:
            raise ValueError(f"target {t} given twice")
        out[key] = bisect_strength(kl_at, t, memo=memo, **kw)
    return out
