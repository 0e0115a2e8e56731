"""A concept file's own instruction: the prompting lever asks exactly it; without one, the sentence about the
concept's description as before; a bad one is refused in one line; the instruct concept files carry the
instruction their positive answers were asked with."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.test_decide_concept_files import _grouped_file
from tests.bench.test_decide_inputs import _decide

OWN = "Answer every request in a very formal, official register."
ROOT = Path(__file__).resolve().parents[2] / "docs/results/instruct/concepts"


def _prompting(path) -> str:
    from geosteer.bench import matched
    from geosteer.bench.concepts import concept_from_dict
    from geosteer.bench.decide_concepts import file_concepts

    (dc,) = file_concepts(str(path))
    concept = concept_from_dict(dc.concept.model_dump())  # as a worker process receives it
    (point,) = matched.build_prompting(type("S", (), {"concept": concept})()).points
    return point.instruction


def test_a_file_concept_with_an_instruction_is_prompted_with_exactly_it(tmp_path):
    _grouped_file(tmp_path / "own.json", description="a formal register", instruction=OWN)
    assert _prompting(tmp_path / "own.json") == OWN
    _grouped_file(tmp_path / "plain.json", description="a formal register")
    assert _prompting(tmp_path / "plain.json") == "Whatever you are asked, make your answer about a formal register."


def test_a_concept_without_an_instruction_dumps_as_before(tmp_path):
    from geosteer.bench.decide_concepts import file_concepts

    _grouped_file(tmp_path / "plain.json")
    (dc,) = file_concepts(str(tmp_path / "plain.json"))
    assert list(dc.concept.model_dump()) == ["name", "direction", "positive", "negative", "prompts", "description"]


@pytest.mark.parametrize("instruction", ["", "   ", "x" * 2001, 3, ["Answer formally."]])
def test_a_bad_instruction_is_refused_in_one_line(monkeypatch, capsys, tmp_path, instruction):
    _grouped_file(tmp_path / "g.json", instruction=instruction)
    err = _decide(monkeypatch, capsys, tmp_path, "--dry-run", "--concepts", "g.json")
    assert "instruction" in err


@pytest.mark.parametrize("name,concepts", [
    ("qwen2.5-0.5b-register", ("formal", "casual")),
    ("qwen2.5-1.5b-refusal", ("refusal",)),
    ("qwen2.5-1.5b-sentiment-refusal", ("positive-sentiment", "negative-sentiment", "refusal")),
])
def test_the_instruct_concept_files_carry_their_admission_instructions(name, concepts):
    """Each file's answers were asked (chat, or few-shot after the same system prompt) with the system prompt
    of the concept's positive condition."""
    from geosteer.bench import instruct_concepts as IC
    from geosteer.bench.concepts import read_concepts

    got = {c.name: c.instruction for c in read_concepts(ROOT / f"{name}.concepts.json")}
    assert got == {c: IC.CHAT[IC.CONCEPTS[c][0]] for c in concepts}
    assert got[concepts[0]].startswith({"formal": "Answer every request in a very formal, official register",
                                        "refusal": "You never help with anything",
                                        "positive-sentiment": "You are a cheerful"}[concepts[0]])
