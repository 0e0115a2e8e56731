"""A concept file's test prompts and its lever and judge texts answer different requests: where a file groups its
texts by request (format 2, AxBench), the requests its drawn test prompts name are held out of the lever and judge
texts for that seed. The bundled concepts and ungrouped (format 1) files deal exactly as before."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tests.bench.test_decide import _concept_file
from tests.bench.test_decide_draw import needs_corpus

INSTRUCT = Path(__file__).resolve().parents[2] / "docs/results/instruct/concepts"
# The draws as the code dealt them before test requests were held out (computed with that code, then pinned): a
# run folder measured then resumes, its units read back.
BUNDLED_DRAWS = "26d5a8ffb15022b53beb1936ad035f5acf5b47fada087c09dca21fa403593911"
FORMAT1_DRAWS = "aa6df55cbfd18f093b348abe288a3300891dd22f7c41c3c2673e001bdba5750a"
INSTRUCT_DRAWS = {"qwen2.5-0.5b-register": "0bc6cbbc49c4bb38808bf3be0df584724f571e5612013126f28901d1699e8056",
                  "qwen2.5-1.5b-refusal": "dcd6c8cb1eff5c82d6d9d6613d7a307797a04db51d7fb9181b2f7eccdef5e1e4"}
# What a run without --concepts records (decide_state.json's "concepts" and the SHA-256 of its "draws").
BUNDLED_IDENTITY = {"source": "bundled", "sha256": "4c4164b5039c360603643de4507bf8a558e50513b01281aa5ecbe5c22be298c9"}
BUNDLED_RECORD = "8ec863c315a9208d993d14c1d032f4b910d4a4f8cb74f9a1842f8441f5d96e2d"


def _digest(dcs, extra: bool = True) -> str:
    doc = [[dc.concept.model_dump(), dc.kind, dc.judge_positive, dc.judge_negative, dc.admission, dc.lexicon,
            dc.extra] if extra else [dc.concept.model_dump(), dc.judge_positive, dc.judge_negative, dc.admission]
           for dc in dcs]
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


@needs_corpus
def test_the_bundled_concepts_deal_as_before():
    from geosteer.bench.decide_concepts import dev_concepts, test_concepts

    assert _digest(test_concepts(0) + test_concepts(1) + dev_concepts(0) + dev_concepts(1)) == BUNDLED_DRAWS


def test_a_run_without_a_file_records_what_it_recorded_before():
    from geosteer.bench.decide_concepts import identity, pool_record
    from geosteer.bench.decide_draw import record

    assert identity() == BUNDLED_IDENTITY
    assert hashlib.sha256(json.dumps(record(pool_record()), sort_keys=True).encode()).hexdigest() == BUNDLED_RECORD


def test_an_ungrouped_file_deals_as_before(tmp_path):
    from geosteer.bench.decide_concepts import file_concepts

    _concept_file(tmp_path / "c.json", 60)
    path = str(tmp_path / "c.json")
    assert _digest(file_concepts(path, 0) + file_concepts(path, 1)) == FORMAT1_DRAWS


def test_the_committed_instruct_files_deal_as_before(tmp_path):
    """Their prompts are requests no text answers: no text is held out for them. The files as they were (their
    first 16 prompts, no instruction) deal as pinned, and the files as they are, drawing the instruct design's 32
    prompts, deal the same lever, judge and admission texts."""
    from geosteer.bench.decide_concepts import file_concepts
    from geosteer.bench.design import DESIGNS

    drawn = DESIGNS["instruct"].test_prompts
    for name, want in INSTRUCT_DRAWS.items():
        path = INSTRUCT / f"{name}.concepts.json"
        doc = json.loads(path.read_text(encoding="utf-8"))
        for c in doc["concepts"]:
            c["prompts"] = c["prompts"][:16]
            c.pop("instruction")
        (tmp_path / path.name).write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        old = file_concepts(str(tmp_path / path.name), 0) + file_concepts(str(tmp_path / path.name), 1)
        assert _digest(old, extra=False) == want
        now = file_concepts(str(path), 0, drawn) + file_concepts(str(path), 1, drawn)
        texts = [[list(dc.concept.positive), list(dc.concept.negative), dc.judge_positive, dc.judge_negative,
                  dc.admission] for dc in old]
        assert texts == [[list(dc.concept.positive), list(dc.concept.negative), dc.judge_positive,
                          dc.judge_negative, dc.admission] for dc in now]
        assert all(len(dc.concept.prompts) == drawn for dc in now)


def _requests_file(path, n: int = 80, named: int = 30, free: int = 4) -> dict[str, str]:
    """A format-2 file: request "Q<i>?" has one answer a side; its prompts are the first ``named`` requests and
    ``free`` requests no text answers. Returns each text's request, from the file as written."""
    ids = [f"Q{i}?" for i in range(n)]
    doc = {"name": "tone", "direction": "promote", "positive": [f"gladly, answer {i} is yes" for i in range(n)],
           "negative": [f"sadly, answer {i} is no" for i in range(n)],
           "prompts": ids[:named] + [f"Free {k}?" for k in range(free)], "groups": {"positive": ids, "negative": ids}}
    path.write_text(json.dumps({"format": "geosteer-concepts", "version": 2, "concepts": [doc]}))
    return {t: g for side in ("positive", "negative") for t, g in zip(doc[side], ids, strict=True)}


def _trained(dc) -> list[str]:
    """A drawn concept's lever texts and the judge's training texts."""
    return [*dc.concept.positive, *dc.concept.negative, *dc.judge_positive, *dc.judge_negative]


def _leaks(dcs, requests_of) -> list[set[str]]:
    """For each drawn concept: the test prompts that are also the request of some lever or judge text."""
    return [set(dc.concept.prompts) & set().union(*(requests_of(t) for t in _trained(dc))) for dc in dcs]


def test_a_format2_files_test_prompts_share_no_request_with_its_lever_and_judge_texts(tmp_path, monkeypatch):
    from geosteer.bench import decide_requests
    from geosteer.bench.decide_concepts import ADMISSION_TEXTS, LEVER_TEXTS, file_concepts

    request = _requests_file(tmp_path / "g.json")
    path = str(tmp_path / "g.json")
    drawn = [file_concepts(path, seed)[0] for seed in (0, 1)]
    assert _leaks(drawn, lambda t: {request[t]}) == [set(), set()]
    for dc in drawn:
        held = {request[t] for t in dc.admission["positive"]}
        tested = (set(dc.concept.prompts) & set(request.values())) - held  # answered, not admission's already
        assert tested and dc.extra["pools"]["test_requests"] == len(tested)
        assert len(dc.judge_positive) == 80 - ADMISSION_TEXTS - LEVER_TEXTS - len(tested)
    assert drawn[0].concept.prompts != drawn[1].concept.prompts  # each seed holds out its own
    monkeypatch.setattr(decide_requests, "tested_requests", lambda c, prompts: set())  # the rule removed
    leaky = [file_concepts(path, seed)[0] for seed in (0, 1)]
    assert all(_leaks(leaky, lambda t: {request[t]}))  # without it, an answer to a test prompt trains a lever


def test_an_axbench_files_test_prompts_share_no_request_with_its_lever_and_judge_texts(tmp_path, monkeypatch):
    from geosteer.bench import decide_requests
    from geosteer.bench.decide_concepts import file_concepts
    from tests.bench.test_decide_axbench_groups import _write, axbench_rows

    inputs = _write(tmp_path / "ax.jsonl", axbench_rows())  # each output's inputs, from the rows as written
    path = str(tmp_path / "ax.jsonl")
    drawn = [file_concepts(path, seed)[0] for seed in (0, 1)]
    assert _leaks(drawn, inputs.__getitem__) == [set(), set()]
    assert all(dc.extra["pools"]["test_requests"] for dc in drawn)
    # request 1 shares an answer with request 0: one request, whose prompt is "Request 0?" alone
    (c,) = __import__("geosteer.bench.axbench", fromlist=["load_concepts"]).load_concepts(tmp_path / "ax.jsonl")
    assert "Request 0?" in c.prompts and "Request 1?" not in c.prompts and "Request 2?" in c.prompts
    monkeypatch.setattr(decide_requests, "tested_requests", lambda c, prompts: set())
    assert all(_leaks([file_concepts(path, seed)[0] for seed in (0, 1)], inputs.__getitem__))


def test_too_few_requests_to_hold_out_the_test_prompts_is_one_line(monkeypatch, capsys, tmp_path):
    """80 requests: 16 for admission, up to 16 for the test prompts, 40 for the levers and the judge (one text a
    side each); 60 are too few where every prompt is answered, enough where no prompt is."""
    from tests.bench.test_decide_inputs import _decide

    _requests_file(tmp_path / "g.json", n=60, named=20, free=0)
    for args in (("--dry-run",), ("--out", "o")):
        err = _decide(monkeypatch, capsys, tmp_path, *args, "--concepts", "g.json")
        assert "concept 'tone': 60 requests, about 72 needed" in err and "test prompts' requests" in err
    assert not (tmp_path / "o").exists()
    from geosteer.bench.decide_concepts import file_concepts

    _requests_file(tmp_path / "free.json", n=60, named=0, free=20)
    (dc,) = file_concepts(str(tmp_path / "free.json"))
    assert dc.extra["pools"]["test_requests"] == 0 and len(dc.judge_positive) == 60 - 16 - 8


def test_the_dry_run_and_the_record_say_the_test_prompts_requests_are_held_out(monkeypatch, capsys, tmp_path):
    from tests.cli_helpers import forbid_model_builds, run_cli

    _requests_file(tmp_path / "g.json")
    _concept_file(tmp_path / "c.json", 60)
    monkeypatch.chdir(tmp_path)
    forbid_model_builds(monkeypatch)
    code, out, err = run_cli(monkeypatch, capsys, "bench", "decide", "--dry-run", "--concepts", "g.json")
    assert code == 0, err
    assert "30 of the 34 prompts of its 1 concept are requests its texts answer" in out
    assert "the requests held out with the test prompts" in out
    code, out, err = run_cli(monkeypatch, capsys, "bench", "decide", "--dry-run", "--concepts", "c.json")
    assert code == 0, err
    assert "requests held out" not in out  # an ungrouped file: the record of the bundled run, unchanged
