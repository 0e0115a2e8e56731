"""The decision statistics against hand computations on tiny inputs (geosteer.bench.stats)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from geosteer.bench.stats import (
    _replicates,
    bootstrap_p,
    compare_pairs,
    decide,
    hierarchical_bootstrap,
    holm,
    minimum_detectable_effect,
    paired_clusters,
    paired_differences,
    variance_components,
)


def rec(concept, seed, prompt, lever, score, kl="0.05"):
    return {"concept": concept, "seed": seed, "prompt": prompt, "lever": lever, "kl_level": kl, "score": score}


def test_paired_differences_drops_unpaired_items_and_sorts():
    records = [rec("c2", 0, "p1", "A", 0.9), rec("c1", 0, "p2", "A", 0.5), rec("c1", 0, "p1", "A", 0.7),
               rec("c1", 0, "p1", "B", 0.2), rec("c2", 0, "p1", "B", 0.4), rec("c2", 1, "p1", "B", 0.1),
               rec("c1", 0, "p2", "A", 0.0, kl="0.2"), rec("c1", 0, "p2", "B", 0.3, kl="0.2"),  # other level
               rec("c1", 0, "p2", "C", 0.3), rec("c1", 1, "p9", "B", 0.3)]  # another lever; B alone
    d = paired_differences(records, "A", "B", "0.05")
    assert list(d) == ["c1", "c2"]
    np.testing.assert_allclose(d["c1"], [0.5])  # (c1, 0, p1) only: p2 has no B at 0.05
    np.testing.assert_allclose(d["c2"], [0.5])
    items = [rec("c", s, p, lv, sc) for s, p, lv, sc in
             [(1, "a", "A", 1.0), (0, "b", "A", 2.0), (0, "a", "A", 3.0), (1, "a", "B", 0), (0, "b", "B", 0),
              (0, "a", "B", 0)]]
    np.testing.assert_allclose(paired_differences(items, "A", "B", "0.05")["c"], [3.0, 2.0, 1.0])  # (seed, prompt)
    with pytest.raises(ValueError, match="two records"):
        paired_differences(items + [rec("c", 0, "a", "A", 0.0)], "A", "B", "0.05")


def test_bootstrap_matches_the_enumerated_distribution():
    """2 concepts x 2 items: 4 concept draws x 4 item draws for each drawn concept, all equally likely.

    A = [0, 1], B = [2, 4]. A drawn concept's item mean is its mean (0.5 or 3) with variance 0.125 or 0.5;
    Var(one drawn mean) = (0.125 + 0.5)/2 + ((0.5 - 1.75)^2 + (3 - 1.75)^2)/2 = 1.875, so the replicate
    (mean of two independent drawn means) has mean 1.75 and variance 0.9375."""
    concepts = {"A": [0.0, 1.0], "B": [2.0, 4.0]}
    values = []
    for c1, c2 in itertools.product("AB", repeat=2):
        for i1, i2, j1, j2 in itertools.product(range(2), repeat=4):
            m1 = (concepts[c1][i1] + concepts[c1][i2]) / 2
            m2 = (concepts[c2][j1] + concepts[c2][j2]) / 2
            values.append((m1 + m2) / 2)
    assert len(values) == 4 * 4 * 4  # 64 equally likely resamples
    assert np.mean(values) == pytest.approx(1.75)
    assert np.var(values) == pytest.approx(0.9375)
    diffs = {k: np.array(v) for k, v in concepts.items()}
    out = hierarchical_bootstrap(diffs, n_boot=40000, seed=3)
    assert out["mean"] == pytest.approx(1.75)
    assert out["se"] == pytest.approx(math.sqrt(0.9375), rel=0.02)
    assert (out["n_concepts"], out["n_items"]) == (2, 4)
    exact_lo, exact_hi = np.quantile(values, [0.025, 0.975])
    assert out["lo"] == pytest.approx(exact_lo, abs=0.13)
    assert out["hi"] == pytest.approx(exact_hi, abs=0.13)
    # the replicates' distribution: the share of each exact value
    reps = _replicates(diffs, 40000, 3)
    assert reps.mean() == pytest.approx(1.75, abs=0.02)
    for v in (0.0, 1.75, 2.5):
        assert np.mean(np.isclose(reps, v)) == pytest.approx(np.mean(np.isclose(values, v)), abs=0.01)


def test_concepts_weigh_the_same_whatever_their_item_counts():
    diffs = {"big": np.ones(10), "small": np.zeros(2)}  # item-weighted mean would be 10/12
    out = hierarchical_bootstrap(diffs, n_boot=20000, seed=0)
    assert out["mean"] == pytest.approx(0.5)
    # constant items: a replicate is the share of "big" among 2 drawn concepts: 0, 1/2, 1 w.p. 1/4, 1/2, 1/4
    assert out["se"] == pytest.approx(math.sqrt(0.125), rel=0.03)
    assert (out["lo"], out["hi"]) == (0.0, 1.0)
    assert out["n_items"] == 12


def test_unequal_item_counts_bootstrap_mean():
    """A = [0, 1, 2] (3 items), B = [10] (1 item): E[replicate] = (1 + 10)/2 = 5.5; se^2 = Var(one drawn mean)/2
    with Var(one drawn mean) = E[Var | concept] + Var(concept mean) = (2/9 + 0)/2 + 4.5^2 = 20.3611
    (a mean of 3 draws from [0, 1, 2] has variance (2/3)/3 = 2/9)."""
    diffs = {"A": np.array([0.0, 1.0, 2.0]), "B": np.array([10.0])}
    out = hierarchical_bootstrap(diffs, n_boot=40000, seed=1, alpha=0.1)
    assert out["mean"] == pytest.approx(5.5)
    var_one = (2 / 3 / 3) / 2 + 4.5**2  # Var of a mean of 3 draws from [0,1,2] is (2/3)/3
    assert out["se"] == pytest.approx(math.sqrt(var_one / 2), rel=0.02)


def test_bootstrap_p_hand_values():
    positive = {"a": np.array([1.0, 2.0]), "b": np.array([3.0])}
    assert bootstrap_p(positive, n_boot=999) == pytest.approx(2 / 1000)  # no replicate <= 0: 2 * (0 + 1)/(999 + 1)
    assert bootstrap_p({"a": np.zeros(3), "b": np.zeros(2)}, n_boot=99) == 1.0
    # a, b are +-1 concepts: replicate <= 0 and >= 0 each with probability 3/4 (the mean is 0 w.p. 1/2)
    assert bootstrap_p({"a": np.array([1.0]), "b": np.array([-1.0])}, n_boot=4000) == 1.0
    assert bootstrap_p(positive, n_boot=500, seed=7) == bootstrap_p(positive, n_boot=500, seed=7)


def test_holm_worked_example():
    # sorted: d 0.005 x4 = 0.02, a 0.01 x3 = 0.03, c 0.03 x2 = 0.06, b 0.04 x1 = 0.04 -> max(0.06, 0.04)
    adjusted = holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005})
    assert list(adjusted) == ["a", "b", "c", "d"]
    assert adjusted == pytest.approx({"a": 0.03, "b": 0.06, "c": 0.06, "d": 0.02})
    assert holm({"x": 0.6, "y": 0.7}) == {"x": 1.0, "y": 1.0}  # 1.2 capped; then monotone
    assert holm({"x": 0.01, "y": 0.011}) == pytest.approx({"x": 0.02, "y": 0.02})
    assert holm({}) == {}


def test_holm_against_statsmodels():
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    p = np.random.default_rng(0).uniform(0, 0.2, size=12)
    expected = multitest.multipletests(p, method="holm")[1]
    got = holm({str(i): float(v) for i, v in enumerate(p)})
    np.testing.assert_allclose([got[str(i)] for i in range(12)], expected)


def _records():
    rng = np.random.default_rng(5)
    out = []
    for c in range(6):
        for seed in range(2):
            for p in range(4):
                for kl in ("0.05", "0.2"):
                    base = rng.uniform(0.2, 0.6)
                    item = (f"c{c}", seed, f"p{p}")
                    out += [rec(*item, "Y", base, kl), rec(*item, "X", base + 0.3, kl),
                            rec(*item, "Z", base + rng.normal(0, 0.01), kl)]
    return out


def test_compare_pairs_holm_over_all_comparisons():
    records = _records() + [rec("c0", 0, "p0", "W", 0.5, "0.05")]  # W at 0.05 only, and Y has nothing to pair at 0.2
    results = compare_pairs(records, [("X", "Y"), ("Z", "Y"), ("W", "Y")], ["0.05", "0.2"], n_boot=2000, seed=4)
    assert [(r["a"], r["b"], r["kl_level"]) for r in results] == [
        ("X", "Y", "0.05"), ("X", "Y", "0.2"), ("Z", "Y", "0.05"), ("Z", "Y", "0.2"), ("W", "Y", "0.05"),
        ("W", "Y", "0.2")]
    missing = results[-1]
    assert missing["n_items"] == 0 and missing["p"] is None and missing["lo"] is None
    tested = results[:-1]
    m = len(tested)  # 5: the family
    order = sorted(range(m), key=lambda i: tested[i]["p"])
    assert [tested[i]["alpha_ci"] for i in order] == pytest.approx([0.05 / (m - k) for k in range(m)])
    expected = holm({str(i): r["p"] for i, r in enumerate(tested)})
    assert [r["p_holm"] for r in tested] == pytest.approx([expected[str(i)] for i in range(m)])
    for r in tested:  # same seed, same replicates: the interval is the bootstrap's at the Holm level
        diffs = paired_clusters(records, r["a"], r["b"], r["kl_level"])
        boot = hierarchical_bootstrap(diffs, n_boot=2000, seed=4, alpha=r["alpha_ci"])
        assert (r["mean"], r["lo"], r["hi"]) == pytest.approx((boot["mean"], boot["lo"], boot["hi"]))
        assert r["p"] == bootstrap_p(diffs, n_boot=2000, seed=4)
    assert results[0]["mean"] == pytest.approx(0.3) and results[0]["lo"] == pytest.approx(0.3)
    assert results[0]["p_holm"] == pytest.approx(min(1.0, 5 * 2 / 2001))
    assert decide(results[0:2]) == "beats" and decide(results[2:4]) == "equivalent"
    assert decide(results[4:6]) == "undecided"  # no interval at 0.2


def test_decide_each_branch():
    def r(lo, hi):
        return {"lo": lo, "hi": hi}
    assert decide([r(0.01, 0.2), r(0.001, 0.3)]) == "beats"
    assert decide([r(0.001, 0.01), r(0.002, 0.015)]) == "beats"  # also inside the margin: "beats" first
    assert decide([r(-0.3, -0.1), r(-0.2, -0.001)]) == "loses"
    assert decide([r(-0.01, 0.015), r(-0.019, 0.019)]) == "equivalent"
    assert decide([r(-0.01, 0.015), r(-0.021, 0.01)]) == "undecided"  # outside the margin at one level
    assert decide([r(0.01, 0.2), r(-0.01, 0.2)]) == "undecided"  # beats at one level only
    assert decide([r(-0.05, -0.01), r(-0.01, 0.01)]) == "undecided"
    assert decide([r(-0.03, 0.03)], margin=0.05) == "equivalent"
    assert decide([r(None, None), r(0.1, 0.2)]) == "undecided"
    with pytest.raises(ValueError):
        decide([])


def test_minimum_detectable_effect_hand_number():
    # C=20, P=5, S=2, m=10: alpha' = 0.005, df = 19: t_0.9975 = 3.173725, t_0.8 = 0.860951 (t tables);
    # sqrt(0.1^2/20 + 0.2^2/200) = sqrt(0.0007) = 0.0264575 -> 4.034676 * 0.0264575 = 0.106747
    mde = minimum_detectable_effect(20, 5, 2, sd_concept=0.1, sd_item=0.2, n_comparisons=10)
    assert mde == pytest.approx(0.106747, abs=2e-6)
    t = pytest.importorskip("scipy.stats").t
    expected = (t.ppf(1 - 0.01 / 2 / 4, 7) + t.ppf(0.9, 7)) * math.sqrt(0.05**2 / 8 + 0.3**2 / (8 * 3 * 1))
    got = minimum_detectable_effect(8, 3, 1, 0.05, 0.3, n_comparisons=4, alpha=0.01, power=0.9)
    assert got == pytest.approx(expected, rel=1e-9)
    with pytest.raises(ValueError):
        minimum_detectable_effect(0, 5, 2, 0.1, 0.2, 1)
    with pytest.raises(ValueError):
        minimum_detectable_effect(1, 5, 2, 0.1, 0.2, 1)  # one concept: no t test


def test_variance_components_hand_values():
    # means 2, 6; MSW = (2 + 2)/(4 - 2) = 2; MSB = 2*(4 + 4)/1 = 16; n0 = (4 - 8/4)/1 = 2; (16 - 2)/2 = 7
    sd_c, sd_i = variance_components({"A": np.array([1.0, 3.0]), "B": np.array([5.0, 7.0])})
    assert (sd_c, sd_i) == pytest.approx((math.sqrt(7), math.sqrt(2)))
    # equal concept means: MSB = 0 < MSW -> clamped at 0; MSW = (25 + 25 + 0)/(4 - 2) = 25
    assert variance_components({"A": np.array([0.0, 10.0]), "B": np.array([5.0, 5.0])}) == pytest.approx((0.0, 5.0))
    sd_c, sd_i = variance_components({"A": np.array([1.0, 2.0])})
    assert math.isnan(sd_c) and sd_i == pytest.approx(math.sqrt(0.5))


def test_variance_components_recover_simulated_sds():
    rng = np.random.default_rng(11)
    diffs = {}
    for c in range(2000):
        n = int(rng.integers(5, 16))  # unequal item counts
        diffs[f"c{c}"] = 0.05 + rng.normal(0, 0.1) + rng.normal(0, 0.3, size=n)
    sd_c, sd_i = variance_components(diffs)
    assert sd_c == pytest.approx(0.1, rel=0.1)
    assert sd_i == pytest.approx(0.3, rel=0.03)


def _cluster_table() -> tuple[dict, dict]:
    """One concept, 6 prompts at 2 seeds, each prompt's two items identical (perfectly correlated): as items
    (12 independent draws) and as prompt clusters."""
    per_prompt = np.array([0.9, -0.3, 0.4, 0.1, -0.6, 0.7])
    items = np.repeat(per_prompt, 2)
    return {"A": items}, {"A": [np.array([x, x]) for x in per_prompt]}


def _naive_replicates(concepts: dict[str, list[list[float]]], n_boot: int, seed: int) -> np.ndarray:
    """An independent two-stage cluster bootstrap, written as loops: concepts with replacement, then each drawn
    concept's clusters with replacement, the concept's mean over the drawn clusters' items."""
    rng = np.random.default_rng(seed + 1000)
    names = sorted(concepts)
    out = np.empty(n_boot)
    for b in range(n_boot):
        means = []
        for _ in names:
            clusters = concepts[names[rng.integers(len(names))]]
            drawn = [clusters[rng.integers(len(clusters))] for _ in clusters]
            means.append(sum(sum(c) for c in drawn) / sum(len(c) for c in drawn))
        out[b] = np.mean(means)
    return out


def test_prompts_are_resampled_as_clusters():
    """With one concept, the replicate SD is the plug-in SE of the mean over the resampled units: over 12 items
    sd/sqrt(12) when they are drawn independently, over 6 prompt clusters sd/sqrt(6): clustering widens it."""
    iid, clustered = _cluster_table()
    per_prompt = np.array([c[0] for c in clustered["A"]])
    want_iid = np.repeat(per_prompt, 2).std(ddof=0) / np.sqrt(12)
    want_cluster = per_prompt.std(ddof=0) / np.sqrt(6)
    se_iid = hierarchical_bootstrap(iid, n_boot=40000, seed=2)["se"]
    se_cluster = hierarchical_bootstrap(clustered, n_boot=40000, seed=2)["se"]
    assert se_iid == pytest.approx(want_iid, rel=0.03) and se_cluster == pytest.approx(want_cluster, rel=0.03)
    assert se_cluster / se_iid == pytest.approx(np.sqrt(2), rel=0.05)
    full = hierarchical_bootstrap(clustered, n_boot=40000, seed=2)
    assert full["mean"] == pytest.approx(per_prompt.mean()) and full["n_items"] == 12


def test_cluster_bootstrap_matches_an_independent_implementation():
    """Several concepts with unequal cluster sizes: the replicate SD and quantiles agree with a loop version."""
    rng = np.random.default_rng(5)
    concepts = {f"c{c}": [list(rng.normal(0.1 * c, 0.3, size=int(rng.integers(1, 4)))) for _ in range(5 + c)]
                for c in range(4)}
    diffs = {c: [np.array(v) for v in cl] for c, cl in concepts.items()}
    ours = _replicates(diffs, 20000, 3)
    naive = _naive_replicates(concepts, 20000, 3)
    assert ours.std() == pytest.approx(naive.std(), rel=0.04)
    assert np.quantile(ours, [0.025, 0.975]) == pytest.approx(np.quantile(naive, [0.025, 0.975]), abs=0.02)
    want = np.mean([sum(map(sum, cl)) / sum(map(len, cl)) for cl in concepts.values()])
    assert hierarchical_bootstrap(diffs, n_boot=10)["mean"] == pytest.approx(want)


def test_paired_clusters_group_a_prompts_seeds():
    records = [rec("c", seed, p, lever, v + (lever == "A"), "0.05") for seed in (0, 1) for p in ("p1", "p0")
               for lever, v in (("A", 0.1 * seed), ("B", 0.0))]
    got = paired_clusters(records, "A", "B", "0.05")
    assert list(got) == ["c"] and [list(x) for x in got["c"]] == [[1.0, 1.1], [1.0, 1.1]]
    assert sorted(np.concatenate(got["c"])) == sorted(paired_differences(records, "A", "B", "0.05")["c"])
