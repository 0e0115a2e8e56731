"""The instruct design's test prompts: the committed concept files' prompt pools (decide's neutral requests no
answer is asked on: distinct, never an admission request, never a request a lever, judge or admission text
answers), each seed's draw of the design's 32, the predicted MDE falling as the prompt-level t formula says, and a
one-concept file accepted where the unit is the prompt (refused where it is the concept)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from geosteer.bench import instruct_concepts as IC
from geosteer.bench.decide_concepts import admission_requests, by_name, neutral_requests
from geosteer.bench.design import DESIGNS, INSTRUCT_PROMPTS
from tests.bench.test_decide_inputs import _decide, models_here  # noqa: F401 - a fixture used below
from tests.cli_helpers import forbid_model_builds, run_cli

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "docs/results/instruct/concepts"
FILES = {"qwen2.5-1.5b-sentiment-refusal": ("qwen2.5-1.5b", 3), "qwen2.5-0.5b-register": ("qwen2.5-0.5b", 2),
         "qwen2.5-1.5b-refusal": ("qwen2.5-1.5b", 1)}
INSTRUCT = DESIGNS["instruct"]


def _answered(model: str) -> set[str]:
    """Every request the committed answers of ``model`` were asked on (any style, any condition)."""
    out = set()
    for path in (FOLDER / model / "texts").glob("*.jsonl"):
        out |= {json.loads(line)["request"] for line in path.read_text(encoding="utf-8").splitlines() if line}
    return out


def test_the_pool_is_decides_unanswered_neutral_requests():
    every, pool = neutral_requests(), IC.test_requests()
    assert len(pool) == len(set(pool)) == 72 >= 2 * INSTRUCT_PROMPTS
    assert pool == list(every[:16]) + list(every[40:])
    assert not set(pool) & set(admission_requests()) and not set(pool) & set(IC.requests())
    assert IC.EXAMPLE_REQUEST not in pool


@pytest.mark.parametrize("name", FILES)
def test_each_committed_concepts_prompts_are_the_pool_and_answer_no_text(name):
    model, n = FILES[name]
    doc = json.loads((FOLDER / f"{name}.concepts.json").read_text(encoding="utf-8"))
    answered = _answered(model)
    assert len(doc["concepts"]) == n and len(answered) >= 64
    for c in doc["concepts"]:
        prompts = c["prompts"]
        assert prompts == IC.test_requests() and len(set(prompts)) >= INSTRUCT_PROMPTS
        asked = set(c["groups"]["positive"]) | set(c["groups"]["negative"])  # every lever/judge/admission text's
        assert asked <= answered and not set(prompts) & (answered | set(admission_requests()))


@pytest.mark.parametrize("name", FILES)
def test_each_seed_draws_the_designs_prompts_and_no_text_answers_them(name):
    path = str(FOLDER / f"{name}.concepts.json")
    model, n = FILES[name]
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    request_of = {}
    for c in doc["concepts"]:
        for side in ("positive", "negative"):
            request_of.update({(c["name"], t.strip()): r for t, r in zip(c[side], c["groups"][side], strict=True)})
    drawn = {}
    for seed in (0, 1):
        for dc in by_name(None, path, seed, False, INSTRUCT.test_prompts):
            p = list(dc.concept.prompts)
            assert len(p) == len(set(p)) == INSTRUCT_PROMPTS and set(p) <= set(IC.test_requests())
            texts = [*dc.concept.positive, *dc.concept.negative]
            assert not {request_of[(dc.name, t.strip())] for t in texts} & set(p)  # no lever text answers one
            assert dc.extra["pools"]["prompts"] == 72 and dc.extra["pools"]["test_requests"] == 0
            drawn[(dc.name, seed)] = p
    assert len(drawn) == 2 * n and all(drawn[(c, 0)] != drawn[(c, 1)] for c, _ in drawn)  # a seed redraws them


def test_a_test_unit_reads_the_designs_draw(monkeypatch):
    """The run's worker draws the concept with the design's test prompts (not the bundled concepts' 16)."""
    from geosteer.bench import decide_driver as D

    seen = []
    monkeypatch.setattr(D, "readers", lambda *a: None)
    monkeypatch.setattr(D, "run_unit", lambda r, dc, seed, *a, **k: seen.append((dc, seed)))
    path = str(FOLDER / "qwen2.5-1.5b-refusal.concepts.json")
    spec = D.RunSpec("qwen2.5-1.5b", "unused", INSTRUCT.to_dict(), concepts_file=path, bundled=False)
    D._test_job((spec, "refusal", 1, {}, 12))
    ((dc, seed),) = seen
    assert seed == 1 and dc.concept.prompts == by_name(["refusal"], path, 1, False, 32)[0].concept.prompts
    assert len(dc.concept.prompts) == 32


def _dry(monkeypatch, capsys, tmp_path, *args: str) -> dict:
    monkeypatch.chdir(tmp_path)
    forbid_model_builds(monkeypatch)
    code, out, err = run_cli(monkeypatch, capsys, "bench", "decide", "--dry-run", "--design", "instruct", "--json",
                             *args)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("name", FILES)
def test_the_mde_falls_as_the_prompt_level_formula_predicts(monkeypatch, capsys, tmp_path, name):
    """32 prompts a concept, one reading each: (t_{1 - a/2m, 31} + t_{0.8, 31}) sd / sqrt(32), sd^2 the prompt
    and seed priors' squares summed; against 16 prompts the MDE falls by that formula's ratio (below the largest
    gain measured: no warning); two seeds drawing 32 of 72 each read about 49 distinct prompts."""
    stats = pytest.importorskip("scipy.stats")
    from geosteer.bench.decide_report import pairs
    from geosteer.bench.endpoints_prompt import predicted_mde

    model, n = FILES[name]
    path = str(FOLDER / f"{name}.concepts.json")
    doc = _dry(monkeypatch, capsys, tmp_path, "--model", model, "--concepts", path)
    m = doc["comparisons"]
    sd_p, sd_s = INSTRUCT.extra["prior_sd_prompt"], INSTRUCT.extra["prior_sd_seed"]

    def mde(p: int, r: float) -> float:
        sd = np.sqrt(sd_p**2 + sd_s**2 / r)
        return (stats.t.ppf(1 - 0.05 / m / 2, p - 1) + stats.t.ppf(0.8, p - 1)) * sd / np.sqrt(p)

    assert doc["concepts"] == n and m == n * 54 and doc["design"]["test_prompts"] == 32
    assert doc["prompts_per_concept"] == 32 and doc["readings_per_prompt"] == 1 and doc["power"] is None
    assert doc["minimum_detectable_effect"] == pytest.approx(mde(32, 1), rel=1e-6)
    assert predicted_mde(INSTRUCT, n, len(pairs()), 16, 1) == pytest.approx(mde(16, 1), rel=1e-6)  # the 16 of before
    assert mde(32, 1) < 0.66 * mde(16, 1) and mde(32, 1) < 0.135 < 0.19 < mde(16, 1)
    two = _dry(monkeypatch, capsys, tmp_path, "--model", model, "--concepts", path, "--seed-list", "0,1")
    p = int(72 * (1 - (40 / 72) ** 2))
    assert two["prompts_per_concept"] == p == 49 and two["readings_per_prompt"] == pytest.approx(64 / 49)
    assert two["minimum_detectable_effect"] == pytest.approx(mde(p, 64 / 49), rel=1e-6)
    assert two["cost"]["test_cpu_hours"] > 1.9 * doc["cost"]["test_cpu_hours"]  # every lever trained twice


def test_the_estimate_of_the_other_designs_is_as_before():
    """At 16 test prompts the readings' scaling is 1: the full and trimmed designs' estimates are what the
    formula without it gives (computed here)."""
    from geosteer.bench.decide_cost import COMMITTED, COMMITTED_CONTEXT, estimate
    from geosteer.bench.decide_run import LEVERS
    from geosteer.bench.matched import LEARNED

    for name in ("full", "trimmed"):
        d = DESIGNS[name]
        assert d.test_prompts == 16
        got = estimate(d, 5, 0, LEVERS, LEARNED, len(d.dev_concepts()))
        for lever in ("caa", "prompting", *LEARNED):
            total, train = COMMITTED[lever]
            if lever in LEARNED:
                train *= d.steps * d.batch_texts / 64 * (1 + 0.3 / d.kl_every)
            rest = (total - COMMITTED[lever][1]) * (1 if lever == "prompting" else len(d.kl_levels) / 2)
            assert got["per_lever_cpu_seconds"][lever] == pytest.approx(train + rest, abs=0.06)
        test = len(d.seeds) * 5 * (COMMITTED_CONTEXT + sum(v for k, v in got["per_lever_cpu_seconds"].items()
                                                             if k != "walls"))
        assert got["test_cpu_hours"] == pytest.approx(test / 3600, abs=0.006)


def test_a_one_concept_file_runs_where_the_unit_is_the_prompt(monkeypatch, capsys, tmp_path,
                                                              models_here):  # noqa: F811
    """Refusal alone: the instruct design's dry run takes it (54 claims, t across its 32 prompts) and its
    verdict is made on one concept; a concept-unit design (--concepts-only) still refuses it, before any run."""
    from geosteer.bench import decide_driver

    path = str(FOLDER / "qwen2.5-1.5b-refusal.concepts.json")
    doc = _dry(monkeypatch, capsys, tmp_path, "--model", "qwen2.5-1.5b", "--concepts", path)
    assert doc["concepts"] == 1 and doc["comparisons"] == 54 and doc["prompts_per_concept"] == 32

    def never(*a, **k):
        raise AssertionError("the run started")

    monkeypatch.setattr(decide_driver, "run_all", never)
    for mode in (["--dry-run"], ["--out", "run"]):
        err = _decide(monkeypatch, capsys, tmp_path, "--concepts", path, "--concepts-only", *mode)
        assert "holds 1 concept (refusal)" in err and "needs >= 2" in err and not (tmp_path / "run").exists()


def test_a_one_concept_verdict_is_decided_by_its_prompts():
    """The prompt-unit rule on one concept's records: Holm over that concept's claims alone, a planted gain
    decided."""
    pytest.importorskip("scipy.stats")
    from geosteer.bench.decide_report import endpoint_verdict
    from tests.bench.test_decide_prompt_unit import LEVELS, _records

    recs = [r for r in _records(gain=0.3, seeds=(0,), prompts=32) if r["concept"] == "formal"]
    doc = endpoint_verdict(recs, LEVELS, INSTRUCT)
    assert doc["rule"]["n_concepts"] == 1 and doc["rule"]["n_prompts"] == 32
    caa = [v for v in doc["verdicts"] if v["lever"] == "caa" and v["versus"] == "stock"]
    assert caa and caa[0]["decision"] != "undecided" and caa[0]["n_prompts"] == 32
