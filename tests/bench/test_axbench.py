"""AxBench concept files (rows as in stanfordnlp/axbench's train_data / latent_eval_data) as geosteer concepts."""

from __future__ import annotations

import json

import pytest

from geosteer.bench.axbench import is_axbench, read_axbench
from geosteer.bench.concepts import file_concept_from_dict
from geosteer.errors import GeosteerError


def _row(cid, concept, category, output, prompt, genre="text"):
    return {"input": prompt, "output": output, "output_concept": concept, "concept_genre": genre,
            "category": category, "dataset_category": "instruction", "concept_id": cid}


def rows() -> list[dict]:
    """A Concept500-shaped train file: a shared negative pool (concept_id -1, "EEEEE") of two genres first,
    then two concepts' positive rows (one text, one code)."""
    out = [_row(-1, "EEEEE", "negative", f"Plain answer number {i}.", f"Question {i}?") for i in range(5)]
    out += [_row(-1, "EEEEE", "negative", f"def f{i}(): return {i}", f"Write code {i}.", "code") for i in range(4)]
    out += [_row(0, "references to cats and kittens", "positive", f"My cat number {i} purrs.", f"Tell me {i}.")
            for i in range(5)]
    out += [_row(1, "Python list comprehensions!", "positive", f"[x * {i} for x in xs]", f"Sum {i} numbers.", "code")
            for i in range(4)]
    return out


def _jsonl(tmp_path, items, name="train.jsonl"):
    p = tmp_path / name
    p.write_text("\n".join(json.dumps(r) for r in items) + "\n")
    return p


def test_jsonl_becomes_concepts_with_genre_matched_shared_negatives(tmp_path):
    concepts = read_axbench(_jsonl(tmp_path, rows()))
    cats, code = concepts
    assert cats["name"] == "0-references-to-cats-and-kittens" and cats["direction"] == "promote"
    assert cats["description"] == "references to cats and kittens"
    assert cats["positive"] == [f"My cat number {i} purrs." for i in range(5)]
    assert cats["negative"] == [f"Plain answer number {i}." for i in range(5)]  # the text genre of the pool
    assert cats["prompts"] == [f"Tell me {i}." for i in range(5)]
    assert cats["groups"] == {"positive": cats["prompts"], "negative": [f"Question {i}?" for i in range(5)]}
    assert code["name"] == "1-Python-list-comprehensions"
    assert code["negative"] == [f"def f{i}(): return {i}" for i in range(4)]
    for c in concepts:
        file_concept_from_dict(c)  # valid geosteer concepts (format 2: grouped by request)


def test_json_list_and_own_negatives_and_hard_negatives(tmp_path):
    items = [_row(7, "rainy weather", "positive", f"It rains {i}.", f"Q{i}") for i in range(4)]
    items += [_row(7, "rainy weather", "negative", f"Stocks {i}.", f"Q{i}") for i in range(3)]
    items += [_row(7, "rain checks//rain man", "hard negative", "He took a rain check.", "Q9")]
    items += [_row(7, "rainy weather", "positive", "  ", "Q0"),
              _row(7, "rainy weather", "positive", "It rains 0.", "Q0")]
    p = tmp_path / "eval.json"
    p.write_text(json.dumps(items))
    (c,) = read_axbench(p)
    assert c["positive"] == [f"It rains {i}." for i in range(4)]  # the blank and the repeated text dropped
    assert c["negative"] == ["Stocks 0.", "Stocks 1.", "Stocks 2.", "He took a rain check."]
    assert c["prompts"] == ["Q0", "Q1", "Q2", "Q3", "Q9"]


def test_names_are_sanitised_and_unique_without_ids(tmp_path):
    items = [{k: v for k, v in r.items() if k != "concept_id"} for r in rows()]
    long = "x" * 100
    items += [_row(None, long, "positive", f"long {i}", f"P{i}") for i in range(4)]
    items += [_row(None, long + "y", "positive", f"longer {i}", f"P{i}") for i in range(4)]
    names = [c["name"] for c in read_axbench(_jsonl(tmp_path, items))]
    assert names[:2] == ["references-to-cats-and-kittens", "Python-list-comprehensions"]
    assert names[2] == "x" * 64 and names[3] == "x" * 60 + "-2"
    assert len(set(names)) == len(names)


def test_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    p = tmp_path / "train_data.parquet"
    pq.write_table(pa.Table.from_pylist(rows()), p)
    assert is_axbench(p)
    assert read_axbench(p) == read_axbench(_jsonl(tmp_path, rows()))
    bad = tmp_path / "bad.parquet"
    bad.write_text("not parquet")
    with pytest.raises(GeosteerError, match="not a readable parquet file"):
        read_axbench(bad)


def test_is_axbench_sniffs(tmp_path):
    assert is_axbench(_jsonl(tmp_path, rows()))
    geosteer = tmp_path / "concepts.json"
    geosteer.write_text(json.dumps([{"name": "cats", "direction": "promote", "positive": [], "negative": [],
                                     "prompts": []}]))
    assert not is_axbench(geosteer)
    junk = tmp_path / "junk.jsonl"
    junk.write_text("{not json")
    assert not is_axbench(junk) and not is_axbench(tmp_path / "missing.jsonl")
    assert not is_axbench(tmp_path / "x.txt")


@pytest.mark.parametrize("text, match", [
    ("", "holds no rows"),
    ('{"input": "q"\n', r"line 1 is not valid JSON"),
    (json.dumps({"input": "q"}) + "\n", r"line 1 has no 'output'"),
    (json.dumps(_row(0, "c", "positive", 3, "q")), r"line 1: 'output' is a int, not a string"),
    (json.dumps(_row(0, "c", "maybe", "o", "q")), r"category 'maybe' is not one of positive, negative"),
    (json.dumps(_row("zero", "c", "positive", "o", "q")), r"concept_id 'zero' is not an integer"),
    ("[1, 2]", r"line 1 is a list, not an object"),
])
def test_malformed_jsonl_is_one_line(tmp_path, text, match):
    p = tmp_path / "bad.jsonl"
    p.write_text(text)
    with pytest.raises(GeosteerError, match=match) as e:
        read_axbench(p)
    assert "\n" not in str(e.value) and str(p) in str(e.value)


def test_malformed_json_and_files(tmp_path):
    cases = {"a.json": ("not json", "is not valid JSON"), "b.json": ('{"rows": []}', "expected a JSON list"),
             "c.json": ("[]", "holds no rows"), "d.json": ('[{"input": "q", "output": "o"}]', "row 0 has no")}
    for name, (text, match) in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(GeosteerError, match=match):
            read_axbench(tmp_path / name)
    with pytest.raises(GeosteerError, match="no such file"):
        read_axbench(tmp_path / "missing.jsonl")
    with pytest.raises(GeosteerError, match=r"\.jsonl, \.json or \.parquet"):
        read_axbench(tmp_path / "a.csv")


def test_too_few_texts_or_no_concept(tmp_path):
    thin = [r for r in rows() if r["concept_id"] != -1]  # no shared negatives: nothing to contrast
    with pytest.raises(GeosteerError, match=r"concept '0-references-to-cats-and-kittens' \(5 positive, 0 negative"):
        read_axbench(_jsonl(tmp_path, thin))
    only_negatives = [r for r in rows() if r["concept_id"] == -1]
    with pytest.raises(GeosteerError, match="no concept has a positive row"):
        read_axbench(_jsonl(tmp_path, only_negatives, "neg.jsonl"))
