"""``bench decide --concepts``: a file's concepts added to the bundled ones (or alone with ``--concepts-only``),
what a run folder records of them, and a concept file's groups held out together (format 2)."""

from __future__ import annotations

import hashlib
import json

import pytest

from tests.bench.test_decide import _concept_file
from tests.bench.test_decide_draw import needs_corpus
from tests.bench.test_decide_inputs import _decide
from tests.cli_helpers import forbid_model_builds, run_cli

BUNDLED = {"source": "bundled", "sha256": hashlib.sha256(b"bundled").hexdigest()}  # what runs have recorded


def _grouped_file(path, n: int = 64, name: str = "tone", version: int = 2, **extra) -> dict:
    """A format-2 file: request i has one answer a side (short texts, so a judge text is the whole text)."""
    reqs = [f"request {i}" for i in range(n)]
    doc = {"name": name, "direction": "promote", "positive": [f"gladly, answer {i} is yes" for i in range(n)],
           "negative": [f"sadly, answer {i} is no" for i in range(n)], "prompts": [f"Q{i}?" for i in range(20)],
           "groups": {"positive": reqs, "negative": reqs}, **extra}
    path.write_text(json.dumps({"format": "geosteer-concepts", "version": version, "concepts": [doc]}))
    return doc


@needs_corpus
def test_a_file_adds_to_the_bundled_concepts_and_takes_the_place_of_one_of_its_name(tmp_path):
    from geosteer.bench.decide_concepts import run_concepts, test_concepts

    _concept_file(tmp_path / "c.json", 60, names=("formal", "c1"))
    bundled = [c.name for c in test_concepts()]
    assert [c.name for c in run_concepts()] == bundled and "formal" in bundled
    both = run_concepts(str(tmp_path / "c.json"))
    assert [c.name for c in both] == [*bundled, "c1"]
    (formal,) = [c for c in both if c.name == "formal"]
    assert formal.kind == "file-promote" and formal.extra["source"]  # the file's, not the templated one
    assert [c.name for c in run_concepts(str(tmp_path / "c.json"), bundled=False)] == ["formal", "c1"]


def test_the_recorded_concepts_keep_the_bundled_identity_and_name_a_file(tmp_path):
    from geosteer.bench.decide_concepts import identity

    _concept_file(tmp_path / "c.json", 60)
    digest = hashlib.sha256((tmp_path / "c.json").read_bytes()).hexdigest()
    assert identity() == BUNDLED and json.dumps(identity()) == json.dumps(BUNDLED)  # byte for byte
    assert identity(str(tmp_path / "c.json")) == {**BUNDLED, "file": {"source": str(tmp_path / "c.json"),
                                                                      "sha256": digest}}
    assert identity(str(tmp_path / "c.json"), bundled=False) == {"source": str(tmp_path / "c.json"),
                                                                 "sha256": digest}


def test_a_file_is_read_afresh_in_another_folder_or_when_rewritten(monkeypatch, tmp_path):
    """The same relative name in two folders gives each folder's concepts, and a file rewritten in place its new
    ones (a parse is reused only for the same name with the same bytes)."""
    from geosteer.bench.decide_concepts import file_concepts, grouped
    from geosteer.errors import GeosteerError

    for d, names in (("a", ("c0", "c1")), ("b", ("x0", "x1"))):
        (tmp_path / d).mkdir()
        _concept_file(tmp_path / d / "c.json", 60, names=names)
    monkeypatch.chdir(tmp_path / "a")
    assert [c.name for c in file_concepts("c.json")] == ["c0", "c1"] and not grouped("c.json")
    monkeypatch.chdir(tmp_path / "b")
    assert [c.name for c in file_concepts("c.json")] == ["x0", "x1"]
    _grouped_file(tmp_path / "b" / "c.json", name="y0")
    assert [c.name for c in file_concepts("c.json")] == ["y0"] and grouped("c.json")
    _concept_file(tmp_path / "b" / "c.json", 60, names=("people", "x1"))
    with pytest.raises(GeosteerError, match="concept 'people'"):
        file_concepts("c.json")


def _sealed(out, concepts: dict) -> None:
    from geosteer.bench.cli_decide import MODEL
    from geosteer.bench.decide_concepts import pool_record
    from geosteer.bench.decide_draw import record
    from geosteer.bench.decide_folder import record_state, state_doc
    from geosteer.bench.decide_run import LEVERS
    from geosteer.bench.design import STATE_FILE, Design

    out.mkdir(parents=True, exist_ok=True)
    record_state(out, STATE_FILE, state_doc(MODEL, "gemma3-270m", concepts, Design().to_dict(), list(LEVERS), [],
                                            [0], record(pool_record())), None)


@pytest.mark.parametrize("recorded,args,ok", [
    ("bundled", [], True),  # a folder measured before files were added still resumes
    ("bundled", ["--concepts", "c.json"], False),
    ("file", ["--concepts", "c.json", "--concepts-only"], True),
    ("file", ["--concepts", "c.json"], False),
    ("both", ["--concepts", "c.json"], True),
    ("both", [], False),
])
def test_a_run_folder_resumes_with_the_concepts_it_records(tmp_path, recorded, args, ok):
    from geosteer.bench.cli_decide import _prepare
    from geosteer.bench.decide_concepts import identity
    from geosteer.bench.design import Design
    from geosteer.errors import GeosteerError

    _concept_file(tmp_path / "c.json", 60)
    path = str(tmp_path / "c.json")
    _sealed(tmp_path / "run", {"bundled": BUNDLED, "file": identity(path, False), "both": identity(path)}[recorded])
    file = tmp_path / "c.json" if "--concepts" in args else None
    call = lambda: _prepare(tmp_path / "run", "smollm2", "gemma3-270m", file, Design(), (), (0,), False,  # noqa: E731
                            "--concepts-only" not in args)
    if ok:
        assert call()["have"]["concepts"] == call()["want"]["concepts"]
        return
    with pytest.raises(GeosteerError, match="holds a run of another design: concepts") as e:
        call()
    assert ("alone" in str(e.value)) == (recorded == "file" or "--concepts-only" in args)


def test_concepts_only_with_one_concept_says_what_is_valid(monkeypatch, capsys, tmp_path):
    _concept_file(tmp_path / "c.json", 60)
    doc = json.loads((tmp_path / "c.json").read_text())
    (tmp_path / "one.json").write_text(json.dumps(doc[:1]))
    for extra in (["--dry-run"], ["--out", "run"]):
        err = _decide(monkeypatch, capsys, tmp_path, *extra, "--concepts", "one.json", "--concepts-only")
        assert "one.json holds 1 concept (c0)" in err and "needs >= 2" in err and "drop --concepts-only" in err
    assert not (tmp_path / "run").exists()


@needs_corpus
def test_a_dry_run_of_one_concept_says_what_is_valid(monkeypatch, capsys, tmp_path):
    err = _decide(monkeypatch, capsys, tmp_path, "--dry-run", "--only", "arts")
    assert "1 test concept chosen (arts)" in err and "needs >= 2" in err and "--only" in err


@needs_corpus
def test_the_dry_run_says_what_the_file_gives_and_what_the_file_alone_costs(monkeypatch, capsys, tmp_path):
    _grouped_file(tmp_path / "g.json", name="formal")
    monkeypatch.chdir(tmp_path)
    forbid_model_builds(monkeypatch)
    code, out, err = run_cli(monkeypatch, capsys, "bench", "decide", "--dry-run", "--concepts", "g.json")
    assert code == 0, err
    assert "22 concepts x" in out and "from g.json: formal of the 22 test concepts" in out  # formal replaced
    assert "formal also names a bundled concept" in out and "held out by group" in out
    code, out, err = run_cli(monkeypatch, capsys, "bench", "decide", "--dry-run", "--concepts", "g.json",
                             "--concepts-only", "--design", "trimmed")
    assert code == 2 and "holds 1 concept" in err  # one concept alone cannot be tested across concepts
    _concept_file(tmp_path / "c.json", 60)
    code, out, err = run_cli(monkeypatch, capsys, "bench", "decide", "--dry-run", "--concepts", "c.json",
                             "--concepts-only", "--design", "trimmed")
    assert code == 0, err
    assert out.startswith("2 concepts x") and "no text groups: texts dealt one by one" in out
    assert "without --concepts-only (the file's concepts added to the bundled ones): 20 concepts" in out


def test_a_grouped_concept_holds_out_whole_groups(tmp_path):
    from geosteer.bench.decide_concepts import ADMISSION_TEXTS, LEVER_TEXTS, file_concepts

    doc = _grouped_file(tmp_path / "g.json")
    group = {t: g for side in ("positive", "negative") for t, g in zip(doc[side], doc["groups"][side], strict=True)}
    for seed in (0, 1):
        (dc,) = file_concepts(str(tmp_path / "g.json"), seed)
        held = {group[t] for side in ("positive", "negative") for t in dc.admission[side]}
        assert {group[t] for t in dc.admission["positive"]} == {group[t] for t in dc.admission["negative"]} == held
        assert len(held) == ADMISSION_TEXTS == len(dc.admission["positive"]) == len(dc.admission["negative"])
        trained = [*dc.concept.positive, *dc.concept.negative, *dc.judge_positive, *dc.judge_negative]
        assert not {group[t] for t in trained} & held  # no answer to a held-out request is a lever or judge text
        assert len(dc.judge_positive) == len(dc.judge_negative) == 64 - ADMISSION_TEXTS - LEVER_TEXTS
        assert dc.extra["pools"]["admission_groups"] == ADMISSION_TEXTS


def test_an_ungrouped_file_may_split_a_request_which_groups_prevent(tmp_path):
    """The same answers without groups are dealt text by text: some request then has one answer held out and
    the other in the judge's training (what format 2 is for)."""
    from geosteer.bench.decide_concepts import file_concepts

    doc = _grouped_file(tmp_path / "g.json")
    (tmp_path / "flat.json").write_text(json.dumps([{k: v for k, v in doc.items() if k != "groups"}]))
    (dc,) = file_concepts(str(tmp_path / "flat.json"))
    index = {t: g for side in ("positive", "negative") for t, g in zip(doc[side], doc["groups"][side], strict=True)}
    held = {index[t] for side in ("positive", "negative") for t in dc.admission[side]}
    assert {index[t] for t in [*dc.judge_positive, *dc.judge_negative]} & held


def test_groups_shared_by_several_texts_are_held_out_together(tmp_path):
    """Two answers a side to one request: the group is held out whole; the admission set keeps 16 a side and
    leaves the group's surplus unused."""
    from geosteer.bench.decide_concepts import ADMISSION_TEXTS, file_concepts

    reqs = [f"r{i // 2}" for i in range(70)]
    _grouped_file(tmp_path / "g.json", n=70, groups={"positive": reqs, "negative": reqs})
    (dc,) = file_concepts(str(tmp_path / "g.json"))
    ids = {f"gladly, answer {i} is yes": reqs[i] for i in range(70)} | {f"sadly, answer {i} is no": reqs[i]
                                                                          for i in range(70)}
    held = {ids[t] for side in ("positive", "negative") for t in dc.admission[side]}
    assert len(dc.admission["positive"]) == len(dc.admission["negative"]) == ADMISSION_TEXTS
    assert len(held) == ADMISSION_TEXTS // 2
    assert not {ids[t] for t in [*dc.judge_positive, *dc.judge_negative, *dc.concept.positive]} & held


@pytest.mark.parametrize("write,needle", [
    (lambda p: _grouped_file(p, version=3), "format version 3 is newer than this geosteer reads"),
    (lambda p: _grouped_file(p, version=1), "format version 1"),
    (lambda p: _grouped_file(p, groups={"positive": ["a"], "negative": ["b"]}), "give one group id per text"),
    (lambda p: p.write_text(json.dumps({"format": "other", "concepts": []})), "expected a non-empty list or"),
    (lambda p: p.write_text(json.dumps([{**_grouped_file(p), "name": "x"}])), "a bare list (format 1) cannot"),
])
def test_a_concept_file_of_another_format_is_one_line(monkeypatch, capsys, tmp_path, write, needle):
    write(tmp_path / "g.json")
    assert needle in _decide(monkeypatch, capsys, tmp_path, "--dry-run", "--concepts", "g.json")


def test_an_answer_file_groups_each_answer_by_its_request(tmp_path):
    from geosteer.bench import instruct_concepts as IC
    from geosteer.bench.concepts import read_concepts

    pos = ["Yes, a.", "Yes, b.", "Yes, a.", " ", "Yes, e.", "Yes, f."]
    neg = ["No, a.", "No, b.", "No, c.", "No, d.", "No, e.", "No, f."]
    reqs = ["qa", "qb", "qc", "qd", "qe", "qf"]  # "Yes, a." answers qa and qc: the two requests are one group
    doc = IC.concept_doc("formal", pos, neg, reqs, reqs)
    assert doc["positive"] == ["Yes, a.", "Yes, b.", "Yes, e.", "Yes, f."]
    assert doc["groups"]["positive"] == ["qa", "qb", "qe", "qf"]
    assert doc["groups"]["negative"] == ["qa", "qb", "qa", "qd", "qe", "qf"]
    (tmp_path / "a.json").write_text(json.dumps(IC.concept_file([doc])))
    (c,) = read_concepts(tmp_path / "a.json")
    assert c.groups.negative == ["qa", "qb", "qa", "qd", "qe", "qf"]
    assert "groups" not in IC.concept_doc("formal", pos, neg)


def test_the_committed_register_file_groups_its_answers_by_their_committed_requests():
    """The groups were recovered from the committed answers (their requests), not by running the model."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "docs/results/instruct/concepts"
    doc = json.loads((root / "qwen2.5-0.5b-register.concepts.json").read_text())
    assert doc["format"] == "geosteer-concepts" and doc["version"] == 2
    asked = {}
    for cond in ("formal", "casual"):
        for line in (root / "qwen2.5-0.5b/texts" / f"shot-{cond}.jsonl").read_text().splitlines():
            row = json.loads(line)
            asked[row["text"].strip()] = row["request"]
    for c in doc["concepts"]:
        for side in ("positive", "negative"):
            assert c["groups"][side] == [asked[t] for t in c[side]]
