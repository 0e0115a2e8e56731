"""An AxBench file in ``bench decide``: its texts grouped by the ``input`` they answer, so the judge's held-out
(admission) texts and its training and lever texts never share a request; bad rows refused in one line."""

from __future__ import annotations

import json

import pytest

from tests.bench.test_decide_inputs import _decide
from tests.cli_helpers import forbid_model_builds, run_cli


def _row(cid, category: str, output: str, prompt: str, concept: str = "formal register") -> dict:
    return {"input": prompt, "output": output, "output_concept": "EEEEE" if cid == -1 else concept,
            "concept_genre": "text", "category": category, "dataset_category": "instruction", "concept_id": cid}


def axbench_rows(cid: int = 3, concept: str = "formal register") -> list[dict]:
    """Requests 0-59 answered on both sides, 60-79 by two positive answers; request 1 repeats request 0's
    formal answer (one group with it); blank answers to requests 7 and 8 (dropped: no link); a shared pool of
    30 negatives, one answering request 5."""
    t = f"c{cid}"
    out = [_row(cid, "positive", f"{t} formally, answer {r}", f"Request {r}?", concept) for r in range(60)]
    out += [_row(cid, "negative", f"{t} casually, answer {r}", f"Request {r}?", concept) for r in range(60)]
    out += [_row(cid, "positive", f"{t} formally, answer {r}{x}", f"Request {r}?", concept)
            for r in range(60, 80) for x in "ab"]
    out += [_row(cid, "positive", f"{t} formally, answer 0", "Request 1?", concept),
            _row(cid, "positive", "  ", "Request 7?", concept), _row(cid, "positive", " ", "Request 8?", concept)]
    out += [_row(-1, "negative", f"pool answer {k}", f"Pool question {k}?") for k in range(30)]
    return [*out, _row(-1, "negative", "pool answer for request 5", "Request 5?")]


def _write(path, rows) -> dict[str, set[str]]:
    """Write the rows as .jsonl; return each non-blank output's inputs (what the split is checked against)."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    inputs: dict[str, set[str]] = {}
    for r in rows:
        if r.get("output", "").strip():
            inputs.setdefault(r["output"], set()).add(r.get("input"))
    return inputs


def _components(sets) -> list[set[str]]:
    """Inputs joined when some text answers both: merge overlapping sets until none overlap."""
    parts: list[set[str]] = []
    for s in sets:
        s = set(s)
        for p in [p for p in parts if p & s]:
            s |= p
            parts.remove(p)
        parts.append(s)
    return parts


def test_an_axbench_concept_groups_its_texts_by_request(tmp_path):
    from geosteer.bench.axbench import load_concepts

    inputs = _write(tmp_path / "ax.jsonl", axbench_rows())
    (c,) = load_concepts(tmp_path / "ax.jsonl")
    texts = [*c.positive, *c.negative]
    want = {t: min(p) for p in _components(inputs[t] for t in texts) for t in texts if inputs[t] <= p}
    assert dict(zip(c.positive, c.groups.positive, strict=True)) == {t: want[t] for t in c.positive}
    assert dict(zip(c.negative, c.groups.negative, strict=True)) == {t: want[t] for t in c.negative}
    # 80 requests with 0 and 1 joined, and 30 pool questions; 7 and 8 stay apart (their blank answers dropped)
    assert len(set(c.groups.positive) | set(c.groups.negative)) == 79 + 30
    assert want["c3 formally, answer 1"] == want["c3 formally, answer 0"] == "Request 0?"
    assert want["pool answer for request 5"] == want["c3 formally, answer 5"] == "Request 5?"
    assert want["c3 formally, answer 7"] != want["c3 formally, answer 8"]


@pytest.mark.parametrize("seed", [0, 1])
def test_no_request_is_both_held_out_and_trained_on(tmp_path, seed):
    from geosteer.bench.axbench import load_concepts
    from geosteer.bench.decide_concepts import ADMISSION_TEXTS, file_concept, file_concepts

    inputs = _write(tmp_path / "ax.jsonl", axbench_rows())
    (dc,) = file_concepts(str(tmp_path / "ax.jsonl"), seed)

    def requests(d) -> tuple[set[str], set[str]]:
        held = [*d.admission["positive"], *d.admission["negative"]]
        used = [*d.concept.positive, *d.concept.negative, *d.judge_positive, *d.judge_negative]
        return set().union(*(inputs[t] for t in held)), set().union(*(inputs[t] for t in used))

    held, used = requests(dc)
    assert len(dc.admission["positive"]) == len(dc.admission["negative"]) == ADMISSION_TEXTS
    assert held and used and not held & used
    (c,) = load_concepts(tmp_path / "ax.jsonl")
    held, used = requests(file_concept(c.model_copy(update={"groups": None}), "", seed))
    assert held & used  # dealt text by text, some request's answers fall on both sides: what the groups prevent


def _axbench_file(tmp_path, name: str = "ax.jsonl") -> str:
    _write(tmp_path / name, [*axbench_rows(3, "formal register"), *axbench_rows(4, "legal register")[:-31]])
    return name


def test_the_dry_run_says_an_axbench_file_is_held_out_by_request(monkeypatch, capsys, tmp_path):
    name = _axbench_file(tmp_path)
    monkeypatch.chdir(tmp_path)
    forbid_model_builds(monkeypatch)
    code, out, err = run_cli(monkeypatch, capsys, "bench", "decide", "--dry-run", "--concepts", name,
                             "--concepts-only", "--design", "trimmed")
    assert code == 0, err
    assert out.startswith("2 concepts x") and "texts held out by request (the rows' input)" in out
    assert "no text groups" not in out


@pytest.mark.parametrize("edit,needle", [
    (lambda rows: [{k: v for k, v in r.items() if k != "input"} for r in rows], "has no 'input'"),
    (lambda rows: [*rows[:5], {**rows[5], "input": "  "}, *rows[6:]], "line 6: 'input' is empty"),
    (lambda rows: [{k: v for k, v in r.items() if k != "output"} for r in rows], "has no 'output'"),
    (lambda rows: [{k: v for k, v in r.items() if k != "category"} for r in rows], "has no 'category'"),
])
def test_bad_axbench_rows_are_one_line(monkeypatch, capsys, tmp_path, edit, needle):
    _write(tmp_path / "ax.jsonl", edit(axbench_rows()))
    err = _decide(monkeypatch, capsys, tmp_path, "--dry-run", "--concepts", "ax.jsonl")
    assert needle in err and "ax.jsonl" in err and '"input": str' in err


@pytest.mark.parametrize("suffix", [".json", ".parquet"])
@pytest.mark.parametrize("column", ["output_concept", "input"])
def test_a_table_missing_a_required_column_is_one_line(monkeypatch, capsys, tmp_path, suffix, column):
    rows = [{k: v for k, v in r.items() if k not in (column, "concept_id")} for r in axbench_rows()]
    if suffix == ".parquet":
        pa = pytest.importorskip("pyarrow")
        pytest.importorskip("pyarrow.parquet").write_table(pa.Table.from_pylist(rows), tmp_path / f"ax{suffix}")
    else:
        (tmp_path / f"ax{suffix}").write_text(json.dumps(rows))
    err = _decide(monkeypatch, capsys, tmp_path, "--dry-run", "--concepts", f"ax{suffix}")
    assert f"row 0 has no {column!r}" in err and f"ax{suffix}" in err and '"output_concept": str' in err
