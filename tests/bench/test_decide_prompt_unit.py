"""The instruct design's rule, the test prompt as the unit (geosteer.bench.endpoints_prompt): each concept's interval
is scipy's one-sample t over its prompt means, Holm runs over every (concept, pair, endpoint) claim, a planted gain
is decided and a null left undecided, the unit is recorded and an unknown one refused, the other designs' verdicts
are unchanged, and benchmarks/decide_recompute.py recomputes a prompt-unit report independently."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

stats = pytest.importorskip("scipy.stats")

from geosteer.bench.decide_report import endpoint_verdict, pairs  # noqa: E402
from geosteer.bench.design import DESIGNS, EARLIER, Design  # noqa: E402
from geosteer.bench.endpoints_prompt import compare, expected_prompts, predicted_mde, prompt_t  # noqa: E402
from geosteer.errors import GeosteerError  # noqa: E402
from tests.bench.test_decide_recompute import R  # noqa: E402 - benchmarks/decide_recompute.py, loaded once

ROOT = Path(__file__).resolve().parents[2]
LEVELS = ["0.05", "0.2"]
FIELD = {"concept": "concept_score", "fluency": "reader_logprob", "relevance": "relevance"}
NULL = {"concept": 0.0, "fluency": -0.10, "relevance": -0.10}
INSTRUCT = DESIGNS["instruct"]


def _records(gain: float = 0.3, seeds=(0, 1), prompts: int = 12, noise: float = 0.1) -> list[dict]:
    """Two concepts, both seeds drawing the same prompts: caa gains ``gain`` on "formal" (costs inside their
    margins), nothing on "casual" (the concept score alone moves, by ``noise`` per reading); lora is stock plus
    a little noise everywhere."""
    rng = np.random.default_rng(11)
    recs = []
    for concept in ("formal", "casual"):
        for i in range(prompts):
            base = np.array([rng.uniform(0.2, 0.5), rng.normal(-2.4, 0.2), rng.uniform(0.8, 1.0)])
            for seed in seeds:
                up = gain if concept == "formal" else 0.0
                rows = {"stock": base, "caa": base + np.array([up + rng.normal(0, noise), -0.02, -0.02]) +
                        rng.normal(0, 0.005, 3), "lora": base + rng.normal(0, 0.01, 3)}
                for level in LEVELS:
                    for lever, v in rows.items():
                        recs.append({"concept": concept, "kind": "file-promote", "direction": "promote",
                                     "seed": seed, "prompt": f"prompt {i}", "lever": lever, "kl_level": level,
                                     "admitted": True, "concept_score": v[0], "reader_logprob": v[1],
                                     "relevance": v[2], "score": (v[0] + v[2]) / 2})
    return recs


def _prompt_means(recs, concept, a, b, level, endpoint) -> np.ndarray:
    """The raw numbers another way: A - B per (seed, prompt), averaged per prompt by hand."""
    val = {(r["lever"], r["seed"], r["prompt"]): r[FIELD[endpoint]] for r in recs
           if r["concept"] == concept and r["kl_level"] == level}
    per: dict[str, list[float]] = {}
    for (lever, s, p), x in val.items():
        if lever == a:
            per.setdefault(p, []).append(x - val[(b, s, p)])
    return np.array([sum(per[p]) / len(per[p]) for p in sorted(per)])


FAMILY = [("caa", "stock"), ("lora", "stock")]


def test_the_prompt_level_interval_is_scipys_t_over_the_prompt_means():
    recs = _records()
    rows = {(r["concept"], r["a"], r["b"], r["endpoint"], r["kl_level"]): r for r in compare(recs, FAMILY, LEVELS)}
    for concept in ("formal", "casual"):
        x = _prompt_means(recs, concept, "caa", "stock", "0.2", "concept")
        got = prompt_t({f"p{i}": np.array([v]) for i, v in enumerate(x)}, 0.05)
        res = stats.ttest_1samp(x, 0.0)
        ci = res.confidence_interval(0.95)
        assert got["df"] == 11 and got["n_prompts"] == 12  # 12 prompts, each drawn by both seeds: 11 df, not 23
        assert got["p"] == pytest.approx(res.pvalue, rel=1e-9, abs=1e-15)
        assert (got["lo"], got["hi"]) == pytest.approx((ci.low, ci.high), abs=1e-12)
        row = rows[(concept, "caa", "stock", "concept", "0.2")]
        assert row["mean"] == pytest.approx(x.mean(), abs=1e-12) and row["p"] == pytest.approx(res.pvalue, rel=1e-9)
        assert row["n_prompts"] == 12 and row["n_items"] == 24 and row["df"] == 11


def test_holm_runs_over_every_concept_pair_and_endpoint_claim():
    recs = _records()
    rows = {(r["concept"], r["a"], r["b"], r["endpoint"], r["kl_level"]): r for r in compare(recs, FAMILY, LEVELS)}
    claims = [(c, a, b, ep) for c in ("casual", "formal") for a, b in FAMILY for ep in FIELD]
    p = {k: max(stats.ttest_1samp(_prompt_means(recs, k[0], k[1], k[2], lv, k[3]), NULL[k[3]]).pvalue
                for lv in LEVELS) for k in claims}
    order = sorted(claims, key=p.get)
    m = len(claims)
    assert m == 12
    running = 0.0
    for i, k in enumerate(order):
        level = 0.05 / (m - i)
        running = max(running, min(1.0, (m - i) * p[k]))
        for lv in LEVELS:
            x = _prompt_means(recs, k[0], k[1], k[2], lv, k[3])
            ci = stats.ttest_1samp(x, 0.0).confidence_interval(1 - level)
            row = rows[(*k, lv)]
            assert row["alpha_ci"] == pytest.approx(level, rel=1e-12)
            assert row["p_claim"] == pytest.approx(p[k], rel=1e-9, abs=1e-12)  # far tail: 1e-16 apart
            assert row["p_holm"] == pytest.approx(running, rel=1e-9, abs=1e-12)
            assert (row["lo"], row["hi"]) == pytest.approx((ci.low, ci.high), abs=1e-12)


def test_a_planted_gain_is_decided_and_a_null_left_undecided():
    doc = endpoint_verdict(_records(), LEVELS, INSTRUCT, FAMILY)
    words = {(v["concept"], v["lever"], v["versus"]): v["decision"] for v in doc["verdicts"]}
    assert words[("formal", "caa", "stock")] == "beats"
    assert words[("casual", "caa", "stock")] == "undecided"  # no gain, and too noisy to say "no effect"
    null = next(r for r in doc["endpoints"] if (r["concept"], r["a"], r["endpoint"], r["kl_level"]) ==
                ("casual", "caa", "concept", "0.2"))
    assert null["lo"] < 0 < null["hi"] and null["reading"] == "no gain shown"
    assert doc["rule"]["unit"] == "prompt" and doc["rule"]["claims"] == 2 * 2 * 3 == doc["rule"]["claims_made"]
    assert doc["markdown"].startswith("Holm over 12 claims made (2 concepts") and "Concept formal:" in doc["markdown"]
    # the same numbers read with the concept as the unit: 2 concepts, 1 df, no interval narrow enough to decide
    concept_level = endpoint_verdict(_records(), LEVELS, EARLIER, FAMILY)
    assert {v["decision"] for v in concept_level["verdicts"]} == {"undecided"}


def test_the_unit_is_recorded_with_the_design_and_an_unknown_one_refused(tmp_path):
    assert INSTRUCT.unit == "prompt" and INSTRUCT.to_dict()["extra"]["unit"] == "prompt"
    for name in ("full", "trimmed"):  # recorded as before: no unit key, the concept
        assert DESIGNS[name].unit == "concept" and "unit" not in json.dumps(DESIGNS[name].to_dict())
    with pytest.raises(ValueError, match="unit is one of concept, prompt"):
        Design(extra={"unit": "prompts"})
    from geosteer.bench.cli_decide import _recorded_design
    from geosteer.bench.decide_folder import check_state, record_state, state_doc
    from geosteer.bench.design import STATE_FILE

    bad = {**INSTRUCT.to_dict(), "extra": {**INSTRUCT.extra, "unit": "item"}}
    with pytest.raises(GeosteerError, match="records a design this version of geosteer cannot read"):
        _recorded_design(tmp_path, {"design": bad}, INSTRUCT)
    assert _recorded_design(tmp_path, {"design": INSTRUCT.to_dict()}, EARLIER).unit == "prompt"
    concept_unit = {**INSTRUCT.to_dict(), "extra": {k: v for k, v in INSTRUCT.extra.items() if k != "unit"}}
    want = state_doc("qwen2.5-0.5b", "smollm2", {"source": "bundled"}, concept_unit, ["caa"], [], [0])
    record_state(tmp_path, STATE_FILE, want, None)
    with pytest.raises(GeosteerError, match="holds a run of another design"):  # read the other way: refused
        check_state(tmp_path, STATE_FILE, {**want, "design": INSTRUCT.to_dict()})


def test_the_other_designs_verdicts_are_unchanged():
    """The committed run's tables give byte for byte its committed verdict, and the trimmed design (the run
    under way records no unit) is read the same way."""
    from geosteer.bench.decide_driver import _design
    from geosteer.bench.decide_report import read_tables

    root = ROOT / "docs/results/decide"
    old = json.loads((root / "results.json").read_text(encoding="utf-8"))
    recs, _, _ = read_tables(root)
    for design in (_design(old["design"]), replace(DESIGNS["trimmed"], kl_levels=(0.05, 0.2))):
        doc = endpoint_verdict(recs, LEVELS, design)
        assert json.dumps(doc["endpoints"]) == json.dumps(old["endpoints"])
        assert json.dumps(doc["verdicts"]) == json.dumps(old["verdicts"])
        assert doc["summary"] == old["summary"]
        assert {k: v for k, v in doc["rule"].items() if k != "predicted_mde"} == {  # the trimmed design's priors
            k: v for k, v in old["rule"].items() if k != "predicted_mde"}  # are another's: its prediction too
    assert old["markdown"].startswith(endpoint_verdict(recs, LEVELS, _design(old["design"]))["markdown"])
    state = ROOT / "results/decide-trimmed/decide_state.json"
    if state.is_file():  # a run folder of the trimmed design: its recorded design reads as the concept unit
        assert _design(json.loads(state.read_text(encoding="utf-8"))["design"]).unit == "concept"


def test_the_predicted_mde_is_the_prompt_level_t_formula():
    sd = np.sqrt(INSTRUCT.extra["prior_sd_prompt"] ** 2 + INSTRUCT.extra["prior_sd_seed"] ** 2 / 2)
    m = 3 * 3 * len(pairs())
    want = (stats.t.ppf(1 - 0.05 / m / 2, 15) + stats.t.ppf(0.8, 15)) * sd / 4
    assert predicted_mde(INSTRUCT, 3, len(pairs()), 16, 2) == pytest.approx(want, rel=1e-9)
    assert expected_prompts(16, 16, 2) == 16  # a pool of 16, all drawn by each seed: the same 16 prompts
    assert expected_prompts(32, 16, 2) == 24 and expected_prompts(32, 16, 1) == 16


def _folder(tmp_path: Path, recs: list[dict], design=INSTRUCT) -> Path:
    """records.csv as the report writes it and results.json from the report's own rule, with its design."""
    with open(tmp_path / "records.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, list(recs[0]))
        w.writeheader()
        w.writerows(recs)
    doc = endpoint_verdict(recs, LEVELS, design)
    (tmp_path / "results.json").write_text(json.dumps({
        "design": design.to_dict(), "decision_levels": [0.05, 0.2], "rule": doc["rule"],
        "endpoints": doc["endpoints"], "verdicts": doc["verdicts"]}, allow_nan=True), encoding="utf-8")
    return tmp_path


def test_the_recomputation_reads_the_prompt_unit_independently(tmp_path, capsys):
    folder = _folder(tmp_path, _records())
    doc = R.run(folder)
    assert doc["unit"] == "prompt" and doc["mismatches"] == []
    assert doc["compared"] > 2 * 18 * 3 * 2 * 10
    words = {(v["concept"], v["lever"], v["versus"]): v["decision"] for v in doc["verdicts"]}
    assert words[("formal", "caa", "stock")] == "beats" and words[("casual", "caa", "stock")] == "undecided"
    report = json.loads((folder / "results.json").read_text())
    row = next(r for r in report["endpoints"] if (r["concept"], r["a"], r["b"], r["endpoint"], r["kl_level"]) ==
               ("formal", "caa", "stock", "concept", "0.05"))
    row["lo"] += 1e-4
    (folder / "results.json").write_text(json.dumps(report))
    bad = R.run(folder)["mismatches"]
    assert len(bad) == 1 and bad[0].startswith("formal caa stock concept 0.05 lo: recomputed")
    report["rule"]["unit"] = "concept"  # the design says prompt, the rule concept: refused, not read either way
    (folder / "results.json").write_text(json.dumps(report))
    assert R.main(["--results", str(folder)]) == 2
    assert "records the unit concept and prompt" in capsys.readouterr().err


def test_walls_training_is_scaled_by_steps_and_texts():
    """Walls learn for ``steps`` on every away text: the estimate is the committed run's walls cost at its own
    design, and at the trimmed design (32 steps x 32 texts) inside what that run measured per suppressed unit."""
    from geosteer.bench.decide_cost import COMMITTED, lever_seconds
    from geosteer.bench.matched import LEARNED

    assert lever_seconds("walls", EARLIER, EARLIER.steps, 2, LEARNED) == pytest.approx(COMMITTED["walls"][0])
    trimmed = DESIGNS["trimmed"]
    got = lever_seconds("walls", trimmed, trimmed.steps, 3, LEARNED)
    assert 321.5 <= got <= 391.5  # the trimmed run's walls units at seed 0, all of each unit
    more = lever_seconds("walls", replace(trimmed, steps=64), 64, 3, LEARNED)
    assert more - got == pytest.approx(got - lever_seconds("walls", replace(trimmed, steps=0), 0, 3, LEARNED))


def test_a_prompt_unit_report_records_its_unit_and_is_recomputed_without_mismatch(tmp_path):
    """The report as bench decide writes it (results.json, verdict.txt) for the instruct design: the unit in its
    design and its rule, the verdict per concept, and the independent recomputation agreeing on every number."""
    from geosteer.bench.decide_report import _csv, write_results

    recs = _records()
    (tmp_path / "records.csv").write_text(_csv(recs), encoding="utf-8")
    write_results(tmp_path, INSTRUCT, recs, [], [])
    saved = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert saved["design"]["extra"]["unit"] == "prompt" == saved["rule"]["unit"]
    assert (tmp_path / "verdict.txt").read_text(encoding="utf-8").startswith("Holm over 18 claims made")
    assert all("concept" in v for v in saved["verdicts"])
    out = R.run(tmp_path)
    assert out["unit"] == "prompt" and out["mismatches"] == [] and out["compared"] > 3000
