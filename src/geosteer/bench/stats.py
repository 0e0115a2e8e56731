"""The benchmark's statistics: paired differences, a hierarchical bootstrap, Holm, the earlier score rule, the MDE.

A record is one scored item: ``{"concept", "seed", "prompt", "lever", "kl_level", "score", ...}``. Two levers A
and B are compared at one KL level through the paired differences d = field_A - field_B on the same
(concept, seed, prompt) (the score by default; the rule in force reads other fields,
:mod:`geosteer.bench.endpoints`). The estimate weighs every concept the same,

    D = (1/C) * sum_c mean_i d_ci,

and in :func:`compare_pairs` its uncertainty comes from resampling concepts, then prompts within each drawn
concept as clusters (a prompt's items at every seed are drawn together: :func:`paired_clusters`), with Holm's
step-down over every (pair, KL level) of the call; :func:`decide` is the earlier rule on the
score alone. The rule in force uses concept-level t intervals instead (:mod:`geosteer.bench.tdist`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from statistics import NormalDist

import numpy as np

from geosteer.bench.tdist import detectable

Key = tuple[str, int, str]


def _reading(value) -> float:
    """A record's value as a float; nan for a missing one (None, '' or nan)."""
    return math.nan if value is None or value == "" else float(value)


def _paired(records: Iterable[dict], a: str, b: str, kl_level: str, field: str) -> list[tuple[Key, float]]:
    """((concept, seed, prompt), field_a - field_b) for every item both levers read at ``kl_level``, sorted."""
    scores: dict[str, dict[Key, float]] = {a: {}, b: {}}
    for r in records:
        if r["lever"] not in scores or str(r["kl_level"]) != str(kl_level):
            continue
        key = (str(r["concept"]), int(r["seed"]), str(r["prompt"]))
        if key in scores[r["lever"]]:
            raise ValueError(f"lever {r['lever']!r} has two records for {key} at kl_level {kl_level}")
        scores[r["lever"]][key] = _reading(r.get(field))
    both = sorted(k for k in scores[a].keys() & scores[b].keys()
                  if not (math.isnan(scores[a][k]) or math.isnan(scores[b][k])))
    return [(key, scores[a][key] - scores[b][key]) for key in both]


def paired_differences(records: Iterable[dict], a: str, b: str, kl_level: str,
                       field: str = "score") -> dict[str, np.ndarray]:
    """concept -> array of d = field_a - field_b over the (seed, prompt) items both levers have at ``kl_level``.

    Items only one lever has, or where either reading of ``field`` is missing (nan), are dropped; concepts are
    sorted, items within a concept by (seed, prompt). A lever with two records for the same item is an error."""
    out: dict[str, list[float]] = {}
    for key, d in _paired(records, a, b, kl_level, field):
        out.setdefault(key[0], []).append(d)
    return {c: np.asarray(d, dtype=float) for c, d in out.items()}


def paired_clusters(records: Iterable[dict], a: str, b: str, kl_level: str,
                    field: str = "score") -> dict[str, list[np.ndarray]]:
    """concept -> the paired differences of :func:`paired_differences` grouped by prompt: one array per prompt
    (its items at every seed), prompts sorted; what the bootstrap resamples as clusters."""
    out: dict[str, dict[str, list[float]]] = {}
    for (concept, _seed, prompt), d in _paired(records, a, b, kl_level, field):
        out.setdefault(concept, {}).setdefault(prompt, []).append(d)
    return {c: [np.asarray(v[p], dtype=float) for p in sorted(v)] for c, v in out.items()}


Diffs = dict[str, np.ndarray] | dict[str, list[np.ndarray]]


def _clusters(value) -> tuple[np.ndarray, np.ndarray]:
    """(sum, size) of each cluster of one concept: an array is one item per cluster, a list one array per cluster."""
    if isinstance(value, list | tuple):
        parts = [np.asarray(x, dtype=float).ravel() for x in value]
        return np.array([x.sum() for x in parts]), np.array([x.size for x in parts], dtype=float)
    x = np.asarray(value, dtype=float).ravel()
    return x, np.ones(x.size)


def _check(diffs: Diffs) -> list[tuple[np.ndarray, np.ndarray]]:
    out = [_clusters(diffs[c]) for c in sorted(diffs)]
    if not out:
        raise ValueError("no paired differences (no concept has an item both levers scored)")
    if any(n.sum() == 0 for _, n in out):
        raise ValueError("a concept has no items")
    if any((n == 0).any() for _, n in out):
        raise ValueError("a cluster has no items")
    return out


def _n_items(diffs: Diffs) -> int:
    return int(sum(n.sum() for _, n in _check(diffs))) if diffs else 0


def _replicates(diffs: Diffs, n_boot: int, seed: int) -> np.ndarray:
    """``n_boot`` hierarchical bootstrap replicates of the equal-weight mean.

    Each replicate draws C concepts with replacement, then for every drawn concept J_c of its clusters with
    replacement (a concept drawn twice gets two independent draws; a cluster is one item when the concept's value
    is an array, one prompt's items when it is a list of arrays, :func:`paired_clusters`), and takes
    (1/C) * sum_j (sum of the drawn clusters' items / their count) for the drawn concepts j."""
    clusters = _check(diffs)
    rng = np.random.default_rng(seed)
    n_c = len(clusters)
    picks = rng.integers(0, n_c, size=(n_boot, n_c))
    means = np.empty((n_boot, n_c))
    for c, (sums, sizes) in enumerate(clusters):
        where = picks == c
        k = int(where.sum())
        if k:
            draws = rng.integers(0, sums.size, size=(k, sums.size))
            means[where] = sums[draws].sum(axis=1) / sizes[draws].sum(axis=1)
    return means.mean(axis=1)


def _point(diffs: Diffs) -> float:
    return float(np.mean([s.sum() / n.sum() for s, n in _check(diffs)]))


def _interval(reps: np.ndarray, alpha: float) -> tuple[float, float]:
    lo, hi = np.quantile(reps, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


def _p_value(reps: np.ndarray) -> float:
    """p = 2 * min((k_le + 1)/(n + 1), (k_ge + 1)/(n + 1)), capped at 1; k_le = #replicates <= 0."""
    n = reps.size
    below = (np.count_nonzero(reps <= 0) + 1) / (n + 1)
    above = (np.count_nonzero(reps >= 0) + 1) / (n + 1)
    return float(min(1.0, 2 * min(below, above)))


def hierarchical_bootstrap(diffs: Diffs, n_boot: int = 4000, seed: int = 0,
                           alpha: float = 0.05) -> dict:
    """Equal-weight mean of the concept means, with a two-sided percentile interval at level 1 - alpha.

    Returns ``{"mean", "lo", "hi", "se", "n_concepts", "n_items"}``: mean = (1/C) sum_c mean_i d_ci,
    lo/hi = the alpha/2 and 1 - alpha/2 quantiles of the hierarchical replicates, se = their SD."""
    reps = _replicates(diffs, n_boot, seed)
    lo, hi = _interval(reps, alpha)
    return {"mean": _point(diffs), "lo": lo, "hi": hi, "se": float(reps.std(ddof=1)) if n_boot > 1 else 0.0,
            "n_concepts": len(diffs), "n_items": _n_items(diffs)}


def bootstrap_p(diffs: Diffs, n_boot: int = 4000, seed: int = 0) -> float:
    """Two-sided bootstrap p-value of D = 0 from the hierarchical replicates (same seed, same replicates as
    :func:`hierarchical_bootstrap`): p = 2 * min((k_le + 1)/(n + 1), (k_ge + 1)/(n + 1)), capped at 1."""
    return _p_value(_replicates(diffs, n_boot, seed))


def _holm_order(p_values: dict[str, float]) -> list[str]:
    """Names by ascending p; ties keep the dict's order."""
    return sorted(p_values, key=lambda k: p_values[k])


def holm(p_values: dict[str, float]) -> dict[str, float]:
    """Holm-Bonferroni adjusted p-values: with p_(1) <= ... <= p_(m),
    p~_(i) = min(1, max_{j <= i} (m - j + 1) * p_(j))."""
    m = len(p_values)
    out: dict[str, float] = {}
    running = 0.0
    for rank, name in enumerate(_holm_order(p_values), start=1):
        running = max(running, min(1.0, (m - rank + 1) * float(p_values[name])))
        out[name] = running
    return {name: out[name] for name in p_values}


def compare_pairs(records: Sequence[dict], pairs: Sequence[tuple[str, str]], kl_levels: Sequence[str],
                  n_boot: int = 4000, seed: int = 0, alpha: float = 0.05) -> list[dict]:
    """One result per (pair, KL level), in that order, with Holm over ALL of them as one family.

    Each result: a, b, kl_level, mean, lo, hi, alpha_ci, p, p_holm, n_concepts, n_items; within a concept the
    bootstrap resamples prompts as clusters (:func:`paired_clusters`). The comparison of
    rank i by p (ascending, 1-based) among the m testable ones gets its interval at alpha_ci = alpha/(m - i + 1)
    (Holm's step-down level). Every comparison uses the same bootstrap seed. A comparison with no paired item
    (e.g. a lever that cannot reach that KL) is left out of the family and has mean/lo/hi/p/p_holm None."""
    results: list[dict] = []
    reps: dict[str, np.ndarray] = {}
    p: dict[str, float] = {}
    for a, b in pairs:
        for level in kl_levels:
            diffs = paired_clusters(records, a, b, level)
            row = {"a": a, "b": b, "kl_level": str(level), "mean": None, "lo": None, "hi": None, "alpha_ci": None,
                   "p": None, "p_holm": None, "n_concepts": len(diffs), "n_items": _n_items(diffs)}
            if diffs:
                name = str(len(results))
                reps[name] = _replicates(diffs, n_boot, seed)
                p[name] = _p_value(reps[name])
                row["mean"] = _point(diffs)
            results.append(row)
    adjusted = holm(p)
    m = len(p)
    for rank, name in enumerate(_holm_order(p), start=1):
        row = results[int(name)]
        row["alpha_ci"] = alpha / (m - rank + 1)
        row["lo"], row["hi"] = _interval(reps[name], row["alpha_ci"])
        row["p"], row["p_holm"] = p[name], adjusted[name]
    return results


def decide(results_for_pair: Sequence[dict], margin: float = 0.02) -> str:
    """The earlier rule on the score alone (superseded by :func:`geosteer.bench.endpoints.decide`: its "loses"
    is also what a lever that does not move the concept gets), over one pair's results at every KL level:
    "beats" if lo > 0 at every level; else "loses" if hi < 0 at every level; else "equivalent" if
    -margin < lo and hi < margin at every level; else "undecided" (also when a level has no interval)."""
    if not results_for_pair:
        raise ValueError("no results to decide on")
    if any(r["lo"] is None or r["hi"] is None for r in results_for_pair):
        return "undecided"
    if all(r["lo"] > 0 for r in results_for_pair):
        return "beats"
    if all(r["hi"] < 0 for r in results_for_pair):
        return "loses"
    if all(r["lo"] > -margin and r["hi"] < margin for r in results_for_pair):
        return "equivalent"
    return "undecided"


def minimum_detectable_effect(n_concepts: int, n_prompts: int, n_seeds: int, sd_concept: float, sd_item: float,
                              n_comparisons: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """MDE = (t_{1 - a'/2, C - 1} + t_{power, C - 1}) * sqrt(sd_concept^2 / C + sd_item^2 / (C * P * S)),
    a' = alpha / m: the concept-level t test's (:func:`geosteer.bench.tdist.detectable`).

    sd_concept: between-concept SD of the concept effect; sd_item: within-concept SD of one paired
    difference; a' is Bonferroni's level, the conservative end of Holm; C >= 2 (a t test needs a spread)."""
    if min(n_concepts, n_prompts, n_seeds, n_comparisons) < 1:
        raise ValueError("counts must be at least 1")
    if n_concepts < 2:
        raise ValueError("a concept-level t test needs at least 2 concepts")
    c, items = n_concepts, n_concepts * n_prompts * n_seeds
    se = math.sqrt(sd_concept**2 / c + sd_item**2 / items)
    return detectable(se, c - 1, alpha / n_comparisons, power)


def variance_components(diffs: dict[str, np.ndarray]) -> tuple[float, float]:
    """(sd_concept, sd_item) of d_ci = mu + a_c + e_ci by one-way random-effects ANOVA (method of moments):

    MSW = sum_c sum_i (d_ci - dbar_c)^2 / (N - C),  MSB = sum_c n_c (dbar_c - dbar)^2 / (C - 1),
    n0 = (N - sum_c n_c^2 / N) / (C - 1),  sd_item^2 = MSW,  sd_concept^2 = max(0, (MSB - MSW) / n0).
    dbar is the item-weighted grand mean. A component the data cannot identify (C < 2, or N = C) is NaN."""
    _check(diffs)
    arrays = [np.asarray(diffs[c], dtype=float).ravel() for c in sorted(diffs)]
    n = np.array([x.size for x in arrays], dtype=float)
    big_n, n_c = float(n.sum()), len(arrays)
    means = np.array([x.mean() for x in arrays])
    ssw = float(sum(((x - x.mean()) ** 2).sum() for x in arrays))
    msw = ssw / (big_n - n_c) if big_n > n_c else math.nan
    if n_c < 2 or math.isnan(msw):
        return (math.nan, math.sqrt(msw) if not math.isnan(msw) else math.nan)
    grand = float((n * means).sum() / big_n)
    msb = float((n * (means - grand) ** 2).sum() / (n_c - 1))
    n0 = (big_n - float((n**2).sum()) / big_n) / (n_c - 1)
    return (math.sqrt(max(0.0, (msb - msw) / n0)), math.sqrt(msw))


def bca_interval(values, alpha: float = 0.05, n_boot: int = 20000, seed: int = 0) -> tuple[float, float] | None:
    """The bias-corrected and accelerated (BCa) bootstrap interval of the mean of ``values`` (Efron 1987).

    Replicates resample the values with replacement; with Φ the normal CDF and θ̂ the sample mean,
    z0 = Φ⁻¹(share of replicates < θ̂ + half the ties), the acceleration from the jackknife means θ_(i),
    a = Σ (θ̄ − θ_(i))³ / (6 (Σ (θ̄ − θ_(i))²)^{3/2}), and the interval is the replicates' quantiles at
    Φ(z0 + (z0 + z_q) / (1 − a (z0 + z_q))) for z_q = Φ⁻¹(alpha/2) and Φ⁻¹(1 − alpha/2). None with fewer
    than 3 values or no spread."""
    x = np.asarray(values, dtype=float).ravel()
    n = x.size
    if n < 3 or np.ptp(x) == 0:
        return None
    reps = x[np.random.default_rng(seed).integers(0, n, size=(n_boot, n))].mean(axis=1)
    theta = float(x.mean())
    share = (np.count_nonzero(reps < theta) + 0.5 * np.count_nonzero(reps == theta)) / n_boot
    norm = NormalDist()
    z0 = norm.inv_cdf(min(max(share, 1 / (n_boot + 1)), n_boot / (n_boot + 1)))
    jack = (x.sum() - x) / (n - 1)
    dev = jack.mean() - jack
    accel = float((dev**3).sum() / (6 * (dev**2).sum() ** 1.5))
    ends = []
    for q in (alpha / 2, 1 - alpha / 2):
        zq = norm.inv_cdf(q)
        ends.append(norm.cdf(z0 + (z0 + zq) / (1 - accel * (z0 + zq))))
    lo, hi = np.quantile(reps, ends)
    return float(lo), float(hi)
