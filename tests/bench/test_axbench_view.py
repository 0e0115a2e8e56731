"""AxBench's protocol view against a hand computation on a tiny synthetic run: the level chosen on one half of the
prompts only, the score reported on the other half, paired with stock, concept-level t intervals."""

from __future__ import annotations

import math

import numpy as np
import pytest

from geosteer.bench.axbench_view import choices, choose, markdown, split_prompts, view
from geosteer.bench.tdist import concept_t

LEVELS = ["0.05", "0.2"]
PROMPTS = ["p1", "p2", "p3", "p4"]


def _rec(concept, lever, level, prompt, score, seed=0, admitted=True):
    return {"concept": concept, "seed": seed, "lever": lever, "kl_level": level, "prompt": prompt, "score": score,
            "admitted": admitted}


def _run(scores: dict, stock: dict, concepts=("a", "b")) -> list[dict]:
    """scores: (concept, level) -> {prompt: score} of lever "x"; stock: concept -> {prompt: score} (every level)."""
    recs = []
    for c in concepts:
        for lv in LEVELS:
            recs += [_rec(c, "stock", lv, p, stock[c][p]) for p in PROMPTS]
            recs += [_rec(c, "x", lv, p, scores[(c, lv)][p]) for p in PROMPTS]
    return recs


def _halves(c):
    return split_prompts(c, PROMPTS, 0)


def _hand(scores, stock):
    """The view's numbers computed by hand: per concept the level with the best mean on the choosing half, then its
    reporting-half scores minus stock's."""
    out = {}
    for c in ("a", "b"):
        pick, report = _halves(c)
        means = {lv: np.mean([scores[(c, lv)][p] for p in pick]) for lv in LEVELS}
        lv = "0.05" if means["0.05"] >= means["0.2"] else "0.2"
        out[c] = (lv, np.array([scores[(c, lv)][p] - stock[c][p] for p in report]))
    return out


def _example():
    rng = np.random.default_rng(0)
    scores = {(c, lv): {p: float(x) for p, x in zip(PROMPTS, rng.uniform(0.2, 0.9, 4), strict=True)}
              for c in ("a", "b") for lv in LEVELS}
    stock = {c: {p: float(x) for p, x in zip(PROMPTS, rng.uniform(0.2, 0.9, 4), strict=True)} for c in ("a", "b")}
    return scores, stock


def test_the_split_is_seeded_disjoint_and_independent_of_order():
    pick, report = split_prompts("a", PROMPTS, 0)
    assert sorted(pick + report) == PROMPTS and not set(pick) & set(report) and len(pick) == len(report) == 2
    assert split_prompts("a", list(reversed(PROMPTS)), 0) == (pick, report)
    many = [f"prompt {i}" for i in range(20)]
    assert split_prompts("a", many, 0) != split_prompts("a", many, 1)
    assert len(split_prompts("a", PROMPTS[:3], 0)[0]) == 2  # the choosing half has the odd one out


def test_choose_takes_the_best_mean_and_the_lower_level_on_a_tie():
    by = {"0.05": {"p": 0.5, "q": 0.7}, "0.2": {"p": 0.9, "q": 0.3}}
    assert choose(by, LEVELS, ["p"]) == "0.2" and choose(by, LEVELS, ["q"]) == "0.05"
    assert choose(by, LEVELS, ["p", "q"]) == "0.05"  # 0.6 each: the lower level
    assert choose({"0.05": {"p": math.nan}}, LEVELS, ["p"]) is None


def test_the_view_matches_a_hand_computation():
    scores, stock = _example()
    hand = _hand(scores, stock)
    doc = view(_run(scores, stock), LEVELS)
    rows = {r["concept"]: r for r in choices(_run(scores, stock), LEVELS)}
    for c, (lv, d) in hand.items():
        assert rows[c]["kl_level"] == lv and rows[c]["n_reporting"] == 2
        np.testing.assert_allclose(rows[c]["differences"], d)
    (row,) = doc["levers"]
    t = concept_t({c: d for c, (_, d) in hand.items()})
    for k in ("mean", "lo", "hi", "p"):
        assert row[k] == pytest.approx(t[k])
    assert row["n_concepts"] == 2 and row["n_items"] == 4
    means = [np.mean([scores[(c, lv)][p] for p in _halves(c)[1]]) for c, (lv, _) in hand.items()]
    assert row["score"] == pytest.approx(np.mean(means))
    assert sum(row["chosen"].values()) == 2 and "| x |" in markdown(doc)
    assert "not the verdict" in markdown(doc) and "by default" in markdown(doc)


def test_a_number_on_the_reporting_half_never_moves_the_choice():
    scores, stock = _example()
    before = {r["concept"]: r for r in choices(_run(scores, stock), LEVELS)}
    for c in ("a", "b"):
        for p in _halves(c)[1]:  # make the unchosen level far better on the reporting half
            other = "0.2" if before[c]["kl_level"] == "0.05" else "0.05"
            scores[(c, other)][p] = 1.0
            scores[(c, before[c]["kl_level"])][p] = 0.0
    after = {r["concept"]: r for r in choices(_run(scores, stock), LEVELS)}
    assert {c: r["kl_level"] for c, r in after.items()} == {c: r["kl_level"] for c, r in before.items()}
    assert all(after[c]["score"] == 0.0 for c in after)  # what is reported is the reporting half


def test_a_number_on_the_choosing_half_does_move_it():
    scores, stock = _example()
    before = {r["concept"]: r["kl_level"] for r in choices(_run(scores, stock), LEVELS)}
    c = "a"
    other = "0.2" if before[c] == "0.05" else "0.05"
    for p in _halves(c)[0]:
        scores[(c, other)][p] = 1.0
    after = {r["concept"]: r["kl_level"] for r in choices(_run(scores, stock), LEVELS)}
    assert after[c] == other and after["b"] == before["b"]


def test_concepts_not_admitted_are_left_out():
    scores, stock = _example()
    recs = [{**r, "admitted": r["concept"] == "a"} for r in _run(scores, stock)]
    (row,) = view(recs, LEVELS)["levers"]
    assert row["n_concepts"] == 1 and row["lo"] is None
