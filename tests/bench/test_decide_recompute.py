"""benchmarks/decide_recompute.py: the verdict recomputed without the report's code agrees with the report on a
hand-made run folder and on the committed run, agrees with a hand computation (scipy's one-sample t test, Holm by
hand), flags a planted difference, and refuses bad input in one line."""

from __future__ import annotations

import csv
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

stats = pytest.importorskip("scipy.stats")

from geosteer.bench.decide_report import endpoint_verdict  # noqa: E402
from geosteer.bench.design import EARLIER  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
LEVELS = ("0.05", "0.2")
CONCEPTS = {"p1": "topic-promote", "p2": "topic-promote", "p3": "topic-promote", "s1": "topic-suppress",
            "s2": "topic-suppress", "s3": "topic-suppress"}
MARGIN = {"concept": 0.02, "fluency": 0.10, "relevance": 0.10}
FIELD = {"concept": "concept_score", "fluency": "reader_logprob", "relevance": "relevance"}


def _module():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("decide_recompute", ROOT / "benchmarks" / "decide_recompute.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


R = _module()


def _records() -> list[dict]:
    """6 admitted concepts x 2 seeds x 4 prompts of stock, caa (+0.2 on the concept, costs inside the margins)
    and lora (stock within ±0.005), at both levels; and one concept not admitted, with wild values."""
    rng = np.random.default_rng(7)
    recs = []
    for concept, admitted in [*((c, True) for c in CONCEPTS), ("x", False)]:
        offset = {lever: rng.normal(0, 0.01, 3) for lever in ("caa", "lora")}
        for seed in (0, 1):
            for i in range(4):
                base = np.array([rng.uniform(0.2, 0.5), rng.normal(-2.4, 0.2), rng.uniform(0.8, 1.0)])
                rows = {"stock": base, "caa": base + np.array([0.2, -0.02, -0.02]) + offset["caa"] +
                        rng.normal(0, 0.005, 3), "lora": base + 0.3 * offset["lora"] + rng.normal(0, 0.001, 3)}
                if not admitted:
                    rows["caa"] = base - 5
                for level in LEVELS:
                    for lever, v in rows.items():
                        gain = 0.1 if lever == "caa" and level == "0.2" else 0.0  # stronger at the higher level
                        recs.append({"concept": concept, "kind": CONCEPTS.get(concept, "topic-promote"),
                                     "direction": "promote", "seed": seed, "prompt": f"prompt {i}", "lever": lever,
                                     "kl_level": level, "admitted": admitted, "concept_score": v[0] + gain,
                                     "reader_logprob": v[1], "relevance": v[2], "score": (v[0] + v[2]) / 2})
    return recs


def _folder(tmp_path: Path, recs: list[dict]) -> Path:
    """records.csv as the report writes it and results.json from the report's own rule."""
    with open(tmp_path / "records.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, list(recs[0]))
        w.writeheader()
        w.writerows(recs)
    doc = endpoint_verdict(recs, list(LEVELS), EARLIER)
    (tmp_path / "results.json").write_text(json.dumps({"decision_levels": [0.05, 0.2], "endpoints": doc["endpoints"],
                                                       "verdicts": doc["verdicts"]}), encoding="utf-8")
    return tmp_path


def test_recomputation_matches_the_report_and_the_known_words(tmp_path):
    doc = R.run(_folder(tmp_path, _records()))
    assert doc["mismatches"] == []
    assert doc["compared"] > 9 * 2 * 10  # every tested interval's numbers, not just the words
    words = {(v["lever"], v["versus"]): v["decision"] for v in doc["verdicts"]}
    assert words[("caa", "stock")] == "beats"
    assert words[("lora", "stock")] == "equivalent"
    assert words[("caa", "lora")] == "beats"
    assert words[("walls", "stock")] == "undecided"  # not measured: no interval, no claim
    assert R.main(["--results", str(tmp_path), "--json", str(tmp_path / "out.json")]) == 0
    assert json.loads((tmp_path / "out.json").read_text())["verdicts"] == doc["verdicts"]


def _means(recs, a, b, level, endpoint):
    """Concept means of A - B computed another way: a dict of the items, concepts in the order met."""
    val = {(r["lever"], r["concept"], r["seed"], r["prompt"]): r[FIELD[endpoint]]
           for r in recs if r["admitted"] and r["kl_level"] == level}
    out: dict[str, list[float]] = {}
    for (lever, c, s, p), x in val.items():
        if lever == a and (b, c, s, p) in val:
            out.setdefault(c, []).append(x - val[(b, c, s, p)])
    return np.array([sum(v) / len(v) for v in out.values()])


def test_intervals_and_holm_by_hand(tmp_path):
    recs = _records()
    doc = R.run(_folder(tmp_path, recs))
    claims = [(a, b, ep) for a, b in (("caa", "stock"), ("lora", "stock"), ("caa", "lora")) for ep in MARGIN]
    null = {ep: -MARGIN[ep] if ep != "concept" else 0.0 for ep in MARGIN}
    p = {k: max(stats.ttest_1samp(_means(recs, k[0], k[1], lv, k[2]), null[k[2]]).pvalue for lv in LEVELS)
         for k in claims}
    level = {k: 0.05 / (len(claims) - i) for i, k in enumerate(sorted(claims, key=p.get))}
    rows = {(r["a"], r["b"], r["endpoint"], r["kl_level"]): r for r in doc["endpoints"]}
    for k in claims:
        for lv in LEVELS:
            res = stats.ttest_1samp(_means(recs, k[0], k[1], lv, k[2]), null[k[2]])
            ci = stats.ttest_1samp(_means(recs, k[0], k[1], lv, k[2]), 0.0).confidence_interval(1 - level[k])
            row = rows[(*k, lv)]
            assert row["p"] == pytest.approx(res.pvalue, rel=1e-9, abs=1e-15)
            assert row["alpha_ci"] == pytest.approx(level[k], rel=1e-12)
            assert (row["lo"], row["hi"]) == pytest.approx((ci.low, ci.high), abs=1e-12)
            assert row["n_concepts"] == 6 and row["n_items"] == 6 * 2 * 4
    gain = rows[("caa", "stock", "concept", "0.2")]
    assert gain["mean"] == pytest.approx(0.3, abs=0.02) and gain["reading"] == "gain"


def test_a_planted_difference_is_flagged(tmp_path):
    folder = _folder(tmp_path, _records())
    doc = json.loads((folder / "results.json").read_text())
    row = next(r for r in doc["endpoints"] if (r["a"], r["b"], r["endpoint"], r["kl_level"]) ==
               ("lora", "stock", "fluency", "0.2"))
    row["hi"] += 1e-4
    next(v for v in doc["verdicts"] if (v["lever"], v["versus"]) == ("caa", "lora"))["decision"] = "undecided"
    (folder / "results.json").write_text(json.dumps(doc))
    bad = R.run(folder)["mismatches"]
    assert len(bad) == 2
    assert bad[0].startswith("lora stock fluency 0.2 hi: recomputed")
    assert bad[1] == "caa vs lora: recomputed beats, report undecided"
    assert R.main(["--results", str(folder)]) == 1


def test_alternatives_are_fresh_families(tmp_path):
    views = R.run(_folder(tmp_path, _records()))["views"]
    assert {"seed 0 alone", "seed 1 alone", "topic-promote only", "topic-suppress only",
            "alternate half A (p1, p3, s2)", "alternate half B (p2, s1, s3)", "BCa instead of t"} <= set(views)
    assert [views[f"without {c}"]["n_concepts"] for c in CONCEPTS] == [5] * 6
    assert views["topic-promote only"]["n_concepts"] == 3
    assert views["all"]["not_undecided"] == {"caa vs stock": "beats", "lora vs stock": "equivalent",
                                             "caa vs lora": "beats"}
    assert views["BCa instead of t"]["tested_intervals"] == 3 * 3 * 2


def test_bad_input_is_one_line(tmp_path, capsys):
    assert R.main(["--results", str(tmp_path / "none")]) == 2
    assert "no records.csv" in capsys.readouterr().err
    folder = _folder(tmp_path, _records())
    (folder / "results.json").write_text("{}")
    assert R.main(["--results", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds no endpoints" in err
    assert R.main(["--results", str(folder), "--rtol", "-1"]) == 2


def test_the_committed_run_matches_its_report_and_sensitivity():
    doc = R.run(ROOT / "docs" / "results" / "decide")
    assert doc["mismatches"] == [] and doc["sensitivity_mismatches"] == []
    assert doc["compared"] > 2000 and doc["stepdown_differs"] == []
