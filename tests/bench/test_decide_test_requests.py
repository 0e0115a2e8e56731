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


def test_the_committed_instruct_files_deal_as_before():
    """Their prompts are requests no text answers: no text is held out for them, so nothing changes."""
    from geosteer.bench.decide_concepts import file_concepts

    for name, want in INSTRUCT_DRAWS.items():
        path = str(INSTRUCT / f"{name}.concepts.json")
        assert _digest(file_concepts(path, 0) + file_concepts(path, 1), extra=False) == want
