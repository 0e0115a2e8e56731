"""The decision rule's endpoints and intervals against hand computations on tiny inputs (scipy as the reference)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from geosteer.bench.endpoints import CONCEPT_MARGIN, FLUENCY_MARGIN, RELEVANCE_MARGIN, compare, decide, reading
from geosteer.bench.stats import bca_interval, paired_differences
from geosteer.bench.tdist import concept_t, detectable, t_cdf, t_quantile, t_sf


@pytest.mark.parametrize("df", [1, 2, 3, 4, 7, 15, 16, 60])
def test_t_distribution_matches_scipy(df):
    t = pytest.importorskip("scipy.stats").t
    for x in (-6.0, -1.3, 0.0, 0.4, 2.1, 3.9, 12.0):
        assert t_cdf(x, df) == pytest.approx(t.cdf(x, df), abs=1e-12)
        assert t_sf(x, df) == pytest.approx(t.sf(x, df), rel=1e-6, abs=1e-14)
    for p in (0.0005, 0.1, 0.5, 0.8, 0.975, 1 - 0.05 / 54 / 2):
        assert t_quantile(p, df) == pytest.approx(t.ppf(p, df), abs=1e-9)


def test_t_closed_forms_by_hand():
    # df = 1 is Cauchy: F(1) = 3/4; df = 2: F(x) = 1/2 + x / (2 sqrt(2 + x^2)), so F(1) = 1/2 + 1/(2 sqrt 3)
    assert t_cdf(1.0, 1) == pytest.approx(0.75, abs=1e-15)
    assert t_cdf(1.0, 2) == pytest.approx(0.5 + 1 / (2 * math.sqrt(3)), abs=1e-15)
    assert t_quantile(0.75, 1) == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(ValueError):
        t_cdf(1.0, 2.5)
    with pytest.raises(ValueError):
        t_quantile(1.0, 3)


def test_concept_t_by_hand():
    """Concept means 2, 4, 0 (items average within a concept): D = 2, sd = 2, se = 2/sqrt(3), df = 2;
    t = sqrt(3) and, with df = 2, P(T > x) = 1/2 - x / (2 sqrt(2 + x^2)) = 1/2 - sqrt(3)/(2 sqrt(5))."""
    diffs = {"a": np.array([1.0, 3.0]), "b": np.array([4.0]), "c": np.array([0.0, 0.0, 0.0])}
    out = concept_t(diffs, alpha=0.05)
    se = 2 / math.sqrt(3)
    q = 0.95 * math.sqrt(2 / (1 - 0.95**2))  # df = 2: F(x) = p <=> x = u sqrt(2 / (1 - u^2)), u = 2p - 1
    assert (out["mean"], out["se"], out["df"], out["n_concepts"], out["n_items"]) == pytest.approx((2, se, 2, 3, 6))
    assert (out["lo"], out["hi"]) == pytest.approx((2 - q * se, 2 + q * se), abs=1e-9)
    assert out["p"] == pytest.approx(2 * (0.5 - math.sqrt(3) / (2 * math.sqrt(5))), abs=1e-12)
    against = concept_t(diffs, alpha=0.05, null=-1.0)  # against a margin: t = 3 / se
    assert against["p"] == pytest.approx(2 * (0.5 - (3 / se) / (2 * math.sqrt(2 + (3 / se) ** 2))), abs=1e-12)
    assert concept_t({"a": np.array([1.0, 2.0])})["lo"] is None  # one concept: no interval


def test_detectable_effect_against_scipy():
    t = pytest.importorskip("scipy.stats").t
    assert detectable(0.01, 15, 0.05 / 54, 0.8) == pytest.approx(
        (t.ppf(1 - 0.05 / 54 / 2, 15) + t.ppf(0.8, 15)) * 0.01, rel=1e-9)


def rec(concept, prompt, lever, level, concept_score, logprob, relevance=1.0, seed=0):
    return {"concept": concept, "seed": seed, "prompt": prompt, "lever": lever, "kl_level": level,
            "concept_score": concept_score, "reader_logprob": logprob, "relevance": relevance, "score": 0.5}


def test_paired_differences_read_a_field_and_drop_missing_readings():
    recs = [rec("c", "p1", "A", "0.05", 0.5, -2.0), rec("c", "p1", "B", "0.05", 0.2, -2.5),
            rec("c", "p2", "A", "0.05", 0.4, math.nan), rec("c", "p2", "B", "0.05", 0.1, -3.0),
            rec("c", "p3", "A", "0.05", 0.4, ""), rec("c", "p3", "B", "0.05", 0.3, -3.0)]
    assert paired_differences(recs, "A", "B", "0.05", "reader_logprob")["c"].tolist() == pytest.approx([0.5])
    assert paired_differences(recs, "A", "B", "0.05", "concept_score")["c"].tolist() == pytest.approx([0.3, 0.3, 0.1])


def _records(gain: dict[str, float], cost: dict[str, float], levels=("0.05", "0.2")) -> list[dict]:
    """4 concepts x 2 prompts; lever L's concept score = stock's + gain[L] + a concept's small wobble, its
    log-prob = stock's + cost[L] + ten times that wobble."""
    out = []
    for c, wobble in enumerate((0.01, -0.01, 0.02, -0.02)):
        for p in range(2):
            for lv in levels:
                out.append(rec(f"c{c}", f"p{p}", "stock", lv, 0.3, -2.0))
                for lever in gain:
                    out.append(rec(f"c{c}", f"p{p}", lever, lv, 0.3 + gain[lever] + wobble / 10,
                                   -2.0 + cost[lever] + wobble))
    return out


def test_compare_holm_over_claims_and_intersection_union_over_levels():
    recs = _records({"A": 0.2, "B": 0.0}, {"A": 0.0, "B": -0.5})
    rows = compare(recs, [("A", "stock"), ("B", "stock")], ["0.05", "0.2"])
    tested = [r for r in rows if r["endpoint"] != "score"]
    assert len(tested) == 2 * 3 * 2 and all(r["n_concepts"] == 4 and r["df"] == 3 for r in tested)
    claims = {(r["a"], r["endpoint"]): r for r in tested if r["kl_level"] == "0.05"}
    m = len(claims)  # 6 claims: levels do not double the family
    order = sorted(claims, key=lambda k: claims[k]["p_claim"])
    assert [claims[k]["alpha_ci"] for k in order] == pytest.approx([0.05 / (m - i) for i in range(m)])
    for r in tested:  # the claim's p is the larger of its levels' p; its intervals sit at the claim's Holm level
        both = [x["p"] for x in tested if (x["a"], x["endpoint"]) == (r["a"], r["endpoint"])]
        assert r["p_claim"] == max(both)
        diffs = paired_differences(recs, r["a"], "stock", r["kl_level"], {"concept": "concept_score",
                                   "fluency": "reader_logprob", "relevance": "relevance"}[r["endpoint"]])
        null = 0.0 if r["endpoint"] == "concept" else -{"fluency": FLUENCY_MARGIN, "relevance": RELEVANCE_MARGIN}[
            r["endpoint"]]
        want = concept_t(diffs, r["alpha_ci"], null)
        assert (r["mean"], r["lo"], r["hi"]) == pytest.approx((want["mean"], want["lo"], want["hi"]), abs=1e-12)
    a_concept = claims[("A", "concept")]
    assert a_concept["mean"] == pytest.approx(0.2) and a_concept["reading"] == "gain"
    assert claims[("B", "fluency")]["reading"] == "harm" and claims[("B", "concept")]["reading"] == "no effect"
    score = [r for r in rows if r["endpoint"] == "score"]
    assert all(r["p_holm"] is None and r["alpha_ci"] == 0.05 for r in score)  # descriptive: unadjusted


def _row(endpoint, level, lo, hi):
    r = {"endpoint": endpoint, "kl_level": level, "lo": lo, "hi": hi}
    return {**r, "reading": reading(r)}


def _pair(concept, fluency, relevance, levels=("0.05", "0.2")):
    return [_row(e, lv, *x) for lv in levels for e, x in (("concept", concept), ("fluency", fluency),
                                                          ("relevance", relevance))]


def test_readings_by_hand():
    assert reading({"endpoint": "concept", "lo": 0.001, "hi": 0.3}) == "gain"
    assert reading({"endpoint": "concept", "lo": -0.3, "hi": -0.001}) == "reversed"
    assert reading({"endpoint": "concept", "lo": -0.019, "hi": 0.019}) == "no effect"
    assert reading({"endpoint": "concept", "lo": -0.021, "hi": 0.01}) == "no gain shown"
    assert reading({"endpoint": "fluency", "lo": -0.099, "hi": 0.2}) == "non-inferior"
    assert reading({"endpoint": "fluency", "lo": -0.5, "hi": -0.101}) == "harm"
    assert reading({"endpoint": "relevance", "lo": -0.2, "hi": -0.05}) == "unclear"
    assert reading({"endpoint": "score", "lo": 0.1, "hi": 0.2}) == "–"
    assert CONCEPT_MARGIN == 0.02


def test_decide_each_word():
    ok, harm, unclear = (-0.05, 0.02), (-0.5, -0.2), (-0.3, 0.0)
    assert decide(_pair((0.01, 0.1), ok, ok)) == "beats"
    assert decide(_pair((0.01, 0.1), harm, ok)) == "undecided"  # a gain at a measured cost: not "beats"
    assert decide(_pair((-0.05, 0.05), harm, ok)) == "worse"  # harm carries it, no gain shown
    assert decide(_pair((-0.01, 0.01), ok, harm)) == "worse"
    assert decide(_pair((-0.01, 0.01), (-0.05, 0.05), (-0.05, 0.05))) == "equivalent"
    # the trap of the earlier rule: no concept movement and costs that are not shown to be harm is no loss
    assert decide(_pair((-0.01, 0.01), unclear, unclear)) == "undecided"
    assert decide(_pair((-0.01, 0.01), ok, ok)) == "equivalent"
    assert decide(_pair((-0.01, 0.01), (-0.05, 0.15), ok)) == "undecided"  # a cost not inside ±its margin
    mixed = _pair((-0.05, 0.05), harm, ok, ("0.05",)) + _pair((-0.05, 0.05), unclear, ok, ("0.2",))
    assert decide(mixed) == "undecided"  # harm at one level only: the intersection-union test fails
    missing = [r for r in _pair((0.01, 0.1), ok, ok) if not (r["endpoint"] == "fluency" and r["kl_level"] == "0.2")]
    assert decide(missing) == "undecided"
    with pytest.raises(ValueError):
        decide([])


def test_bca_interval_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    x = np.array([0.31, -0.02, 0.05, 0.4, 0.12, 0.9, 0.0, 0.22, -0.1, 0.6, 0.15, 0.07])
    want = stats.bootstrap((x,), np.mean, confidence_level=0.95, method="BCa", n_resamples=100000,
                           random_state=1).confidence_interval
    got = bca_interval(x, 0.05, 100000, seed=1)
    assert got == pytest.approx((want.low, want.high), abs=0.01)
    assert bca_interval([1.0, 1.0, 1.0]) is None and bca_interval([0.0, 1.0]) is None


def test_compare_reports_a_bca_interval_beside_the_t_interval():
    recs = _records({"A": 0.2}, {"A": 0.0})
    rows = compare(recs, [("A", "stock")], ["0.05", "0.2"])
    for r in rows:
        diffs = paired_differences(recs, "A", "stock", r["kl_level"], {"concept": "concept_score", "score": "score",
                                   "fluency": "reader_logprob", "relevance": "relevance"}[r["endpoint"]])
        want = bca_interval([d.mean() for d in diffs.values()], r["alpha_ci"], 20000, seed=0)
        assert r["bca"] == (None if want is None else list(want))


def test_a_claim_without_an_interval_at_every_level_is_left_out_of_the_family():
    recs = [r for r in _records({"A": 0.2, "B": 0.0}, {"A": 0.0, "B": -0.5})
            if not (r["lever"] == "B" and r["kl_level"] == "0.2" and r["concept"] != "c0")]  # B at 0.2: 1 concept
    rows = compare(recs, [("A", "stock"), ("B", "stock")], ["0.05", "0.2"])
    b_rows = [r for r in rows if r["a"] == "B" and r["endpoint"] != "score"]
    assert all(r["lo"] is None and r["p_holm"] is None and r["reading"] == "–" for r in b_rows)
    a_rows = [r for r in rows if r["a"] == "A" and r["endpoint"] != "score"]
    assert sorted({r["alpha_ci"] for r in a_rows}) == pytest.approx([0.05 / 3, 0.05 / 2, 0.05])  # 3 claims
    assert decide([r for r in rows if r["a"] == "B"]) == "undecided"
