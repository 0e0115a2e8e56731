"""The concept file: schema refused in one line before any model loads; deterministic hash splits."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from geosteer.bench.concepts import deal, read_concepts, split_concept
from geosteer.errors import GeosteerError
from tests.bench.conftest import CATS
from tests.cli_helpers import refused_before_load


def _write(tmp_path, doc, name="c.json"):
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return p


def test_splits_are_deterministic_disjoint_and_independent_of_order(tmp_path):
    a = read_concepts(_write(tmp_path, [CATS]))[0]
    shuffled = {**CATS, **{k: list(reversed(CATS[k])) for k in ("positive", "negative", "prompts")}}
    b = read_concepts(_write(tmp_path, [shuffled], "d.json"))[0]
    sa, sb = split_concept(a, seed=0), split_concept(b, seed=0)
    assert sa == sb
    assert sorted(sa.lever_positive + sa.judge_positive) == sorted(CATS["positive"])
    assert not set(sa.lever_positive) & set(sa.judge_positive)
    assert not set(sa.validation) & set(sa.test) and sorted(sa.validation + sa.test) == sorted(CATS["prompts"])
    assert abs(len(sa.lever_negative) - len(sa.judge_negative)) <= 1


def test_the_seed_changes_the_split():
    items = [f"text number {i}" for i in range(40)]
    assert deal(items, 0, "x", "positive") == deal(list(reversed(items)), 0, "x", "positive")
    assert deal(items, 0, "x", "positive") != deal(items, 1, "x", "positive")


def test_bundled_concepts_are_valid_and_cover_the_kinds():
    path = resources.files("geosteer.data").joinpath("bench_concepts.json")
    concepts = read_concepts(path)
    assert len(concepts) >= 12
    assert {c.direction for c in concepts} == {"promote", "suppress"}
    names = {c.name for c in concepts}
    assert {"positive-sentiment", "negative-sentiment", "formal", "refusal"} <= names


@pytest.mark.parametrize("doc, words", [
    ("not json", "not valid JSON"),
    ({"name": "x"}, "non-empty list"),
    ([{**CATS, "direction": "boost"}], "direction"),
    ([{**CATS, "positive": CATS["positive"][:2]}], "positive"),
    ([{**CATS, "prompts": ["only one"]}], "prompts"),
    ([{**CATS, "extra": 1}], "extra"),
    ([{**CATS, "negative": ["a", "b", "c", ""]}], "empty string"),
    ([CATS, CATS], "used twice"),
])
def test_schema_errors_are_one_line(tmp_path, doc, words):
    with pytest.raises(GeosteerError, match=words) as e:
        read_concepts(_write(tmp_path, doc))
    assert "\n" not in str(e.value)


def test_cli_refuses_a_bad_concept_file_before_loading(tmp_path, monkeypatch, capsys):
    bad = _write(tmp_path, [{**CATS, "direction": "boost"}])
    line = refused_before_load(monkeypatch, capsys, "bench", "steering", "-m", "tiny-llama", "--concepts",
                               str(bad), "--out", str(tmp_path / "out"))
    assert "direction" in line
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_cli_refuses_unknown_levers_and_foreign_folders(tmp_path, monkeypatch, capsys, concept_file):
    line = refused_before_load(monkeypatch, capsys, "bench", "steering", "--concepts", str(concept_file),
                               "--out", str(tmp_path / "o"), "--levers", "caa,magic")
    assert "magic" in line and "prompting" in line
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    line = refused_before_load(monkeypatch, capsys, "bench", "steering", "--concepts", str(concept_file),
                               "--out", str(mine))
    assert "bench_state.json" in line and (mine / "notes.txt").read_text() == "keep"


def test_cli_reads_the_bundled_concepts_by_name(tmp_path, monkeypatch, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    line = refused_before_load(monkeypatch, capsys, "bench", "steering", "--concepts", "bundled", "--out", str(mine))
    assert "bench_state.json" in line  # the concepts were read; the folder is what is refused
