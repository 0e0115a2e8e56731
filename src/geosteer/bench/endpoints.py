"""The decision rule's endpoints: a concept gain that can say "beats", costs that can say "worse".

For lever A against a reference B at one control-KL level, every endpoint is a paired difference per
(concept, seed, prompt), averaged per concept, with a concept-level t interval (:mod:`geosteer.bench.tdist`):

- **concept** (primary): the judge's concept score, A minus B. Gain when the interval is above 0; "no effect"
  when it lies inside ±:data:`CONCEPT_MARGIN`.
- **fluency** (secondary): ℓ_A − ℓ_B, ℓ being the independent reader's mean log-prob per token of the
  continuation read on its own (BOS first, no prompt; ``reader_logprob`` in the records), uncapped: the
  reference is not at a ceiling by construction. Non-inferior when the interval's lower bound is above
  −:data:`FLUENCY_MARGIN`; harm when its upper bound is below it.
- **relevance** (secondary): the recorded instruction relevance, A minus B, with margin :data:`RELEVANCE_MARGIN`.
  It is the prompt-continuation similarity relative to the stock model's and capped at 1, so against stock
  the lever cannot gain here and the test is conservative for the lever.
- **score** (descriptive): AxBench's harmonic mean of the three scores; an unadjusted 95 % interval, no word.

Beside each t interval, a BCa bootstrap interval over the same concept means at the same level is reported as a
second view (:func:`geosteer.bench.stats.bca_interval`); the words read the t interval.

Each (pair, tested endpoint) is one claim "at every KL level", an intersection-union test: its p is the largest
of the levels' two-sided p (against 0 for the concept, against −margin for a cost), and it holds only where every
level's interval shows it, each at the same level (no doubling). Holm's step-down runs over the claims made:
the claim of rank i by p among m gets its intervals at alpha / (m − i + 1).

The words (:func:`decide`), for A against B at every KL level:

- **beats**: concept gain, and both costs non-inferior;
- **worse**: harm shown on a cost (fluency or relevance), and no concept gain shown;
- **equivalent**: the concept interval inside ±:data:`CONCEPT_MARGIN` and both costs inside ±their margins;
- **undecided**: anything else. A concept interval that excludes no effect is never read as a loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from geosteer.bench.stats import bca_interval, holm, paired_differences
from geosteer.bench.tdist import concept_t, detectable

CONCEPT_MARGIN = 0.02  # P(concept): "no effect" when the whole interval is inside ±0.02
FLUENCY_MARGIN = 0.10  # nats per token: a text at most ~10 % less probable per token than the reference's
RELEVANCE_MARGIN = 0.10  # relative relevance: at least ~90 % of the reference's prompt-continuation similarity
POWER = 0.8
N_BCA = 20000  # replicates of the BCa interval, reported beside the t interval (not part of the decision)


@dataclass(frozen=True)
class Endpoint:
    name: str
    field: str  # the per-item record field
    role: str  # primary, secondary or descriptive
    margin: float
    unit: str

    @property
    def null(self) -> float:
        """The value the two-sided test is against: no effect for the concept, the margin for a cost."""
        return 0.0 if self.role != "secondary" else -self.margin


CONCEPT = Endpoint("concept", "concept_score", "primary", CONCEPT_MARGIN, "P(concept)")
FLUENCY = Endpoint("fluency", "reader_logprob", "secondary", FLUENCY_MARGIN, "nats/token")
RELEVANCE = Endpoint("relevance", "relevance", "secondary", RELEVANCE_MARGIN, "relative relevance")
SCORE = Endpoint("score", "score", "descriptive", 0.0, "harmonic mean")
TESTED = (CONCEPT, FLUENCY, RELEVANCE)
ENDPOINTS = {e.name: e for e in (*TESTED, SCORE)}


def n_claims(n_pairs: int) -> int:
    """The Holm family's size: one claim per (pair, tested endpoint); KL levels do not multiply it."""
    return n_pairs * len(TESTED)


def reading(row: dict) -> str:
    """What one (pair, endpoint, level) interval shows: gain / reversed / no effect / no gain shown for the
    concept, non-inferior / harm / unclear for a cost; "–" for no interval or a descriptive endpoint."""
    ep, lo, hi = ENDPOINTS[row["endpoint"]], row["lo"], row["hi"]
    if lo is None or hi is None or ep.role == "descriptive":
        return "–"
    if ep.role == "primary":
        if lo > 0:
            return "gain"
        if hi < 0:
            return "reversed"
        return "no effect" if -ep.margin < lo and hi < ep.margin else "no gain shown"
    if lo > -ep.margin:
        return "non-inferior"
    return "harm" if hi < -ep.margin else "unclear"


def _level_rows(records: Sequence[dict], a: str, b: str, ep: Endpoint, levels: Sequence[str],
                alpha: float) -> list[dict]:
    rows = []
    for lv in levels:
        diffs = paired_differences(records, a, b, lv, field=ep.field)
        res = concept_t(diffs, alpha, ep.null)
        rows.append({"a": a, "b": b, "endpoint": ep.name, "kl_level": str(lv), **res, "alpha_ci": alpha})
    return rows


def compare(records: Sequence[dict], pairs: Sequence[tuple[str, str]], levels: Sequence[str],
            alpha: float = 0.05, power: float = POWER) -> list[dict]:
    """One row per (pair, endpoint, KL level), the tested endpoints with Holm over the claims (module doc).

    Each row: a, b, endpoint, kl_level, mean, se, df, lo, hi, p (this level's), alpha_ci, p_claim (the claim's
    intersection-union p), p_holm, mde (the difference this interval finds with ``power``), reading, bca (the
    BCa bootstrap interval over the concept means at the same level, a second view: not part of the decision).
    A claim with a level that has fewer than 2 concepts is left out of the family (its rows: no interval)."""
    rows: list[dict] = []
    claims: dict[str, list[dict]] = {}
    for a, b in pairs:
        for ep in (*TESTED, SCORE):
            level_rows = _level_rows(records, a, b, ep, levels, alpha)
            rows += level_rows
            if ep.role != "descriptive" and all(r["p"] is not None for r in level_rows):
                claims[f"{a}|{b}|{ep.name}"] = level_rows
            elif ep.role != "descriptive":  # not testable at every level: no interval at any
                for r in level_rows:
                    r.update(lo=None, hi=None)
    p_claim = {k: max(r["p"] for r in v) for k, v in claims.items()}
    adjusted, m = holm(p_claim), len(p_claim)
    for rank, key in enumerate(sorted(p_claim, key=lambda k: p_claim[k]), start=1):
        level = alpha / (m - rank + 1)
        ep = ENDPOINTS[key.rsplit("|", 1)[1]]
        for r in claims[key]:
            diffs = paired_differences(records, r["a"], r["b"], r["kl_level"], field=ep.field)
            r.update({k: v for k, v in concept_t(diffs, level, ep.null).items() if k in ("lo", "hi")})
            r.update(alpha_ci=level, p_claim=p_claim[key], p_holm=adjusted[key])
    for r in rows:
        r.setdefault("p_claim", None)
        r.setdefault("p_holm", None)
        r["mde"] = detectable(r["se"], r["df"], r["alpha_ci"], power) if r["se"] is not None else None
        r["reading"] = reading(r)
        r["bca"] = _bca(records, r) if r["se"] is not None else None
    return rows


def _bca(records: Sequence[dict], row: dict) -> list[float] | None:
    """The second interval: BCa over the concept means, at the row's level (bootstrap seed 0)."""
    diffs = paired_differences(records, row["a"], row["b"], row["kl_level"], field=ENDPOINTS[row["endpoint"]].field)
    out = bca_interval([np.mean(d) for d in diffs.values()], row["alpha_ci"], N_BCA, seed=0)
    return None if out is None else list(out)


def decide(rows_for_pair: Sequence[dict]) -> str:
    """The word for one pair from its rows at every KL level (module doc); "undecided" when a tested
    endpoint has a level without an interval."""
    tested = [r for r in rows_for_pair if ENDPOINTS[r["endpoint"]].role != "descriptive"]
    if not tested:
        raise ValueError("no tested endpoint to decide on")
    levels = sorted({r["kl_level"] for r in tested})
    by = {(r["endpoint"], r["kl_level"]): r for r in tested}
    if any((ep.name, lv) not in by or by[(ep.name, lv)]["lo"] is None for ep in TESTED for lv in levels):
        return "undecided"

    def every(test) -> bool:
        return all(test(lv) for lv in levels)

    def word(ep: Endpoint, lv: str) -> str:
        return by[(ep.name, lv)]["reading"]

    costs = (FLUENCY, RELEVANCE)
    if every(lambda lv: word(CONCEPT, lv) == "gain" and all(word(e, lv) == "non-inferior" for e in costs)):
        return "beats"
    if every(lambda lv: word(CONCEPT, lv) != "gain" and any(word(e, lv) == "harm" for e in costs)):
        return "worse"
    if every(lambda lv: word(CONCEPT, lv) == "no effect" and all(
            by[(e.name, lv)]["lo"] > -e.margin and by[(e.name, lv)]["hi"] < e.margin for e in costs)):
        return "equivalent"
    return "undecided"


def verdicts(rows: Sequence[dict], pairs: Sequence[tuple[str, str]]) -> list[dict]:
    """Per pair: the word and, per endpoint and level, the mean and interval (``<endpoint>_<level>``)."""
    out = []
    for a, b in pairs:
        mine = [r for r in rows if r["a"] == a and r["b"] == b]
        v: dict = {"lever": a, "versus": b, "decision": decide(mine) if mine else "undecided",
                   "n_concepts": max((r["n_concepts"] for r in mine), default=0)}
        for r in mine:
            v[f"{r['endpoint']}_{r['kl_level']}"] = {k: r[k] for k in ("mean", "lo", "hi", "reading", "mde", "bca")}
        out.append(v)
    return out
