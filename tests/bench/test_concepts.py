"""The concept file: its schema refused in one line; the bundled file valid."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from geosteer.bench.concepts import read_concepts
from geosteer.errors import GeosteerError
from tests.bench.conftest import CATS


def _write(tmp_path, doc, name="c.json"):
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return p


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
