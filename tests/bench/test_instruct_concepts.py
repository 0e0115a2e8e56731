"""The instruct models' answer-labelled concepts: requests, judges against independent computations, and the
concept file ``bench decide --concepts`` reads (no real model)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from geosteer.bench import instruct_concepts as IC
from tests.cli_helpers import forbid_model_builds, one_line_exit_2, run_cli

CONCEPT_FILES = sorted(Path(__file__).resolve().parents[2].glob("docs/results/instruct/concepts/*.concepts.json"))


class WordEncoder:
    """A stand-in for the sentence encoder: counts of a few words, so a judge's answers can be recomputed."""

    name_or_path = "words"
    WORDS = ("happy", "sad", "day", "the", "walk")

    def encode(self, texts):
        return np.array([[t.split().count(w) for w in self.WORDS] for t in texts], np.float32)


class Joiner:
    """A stand-in chat template: role:content turns joined by |."""

    bos_token = None

    def apply_chat_template(self, messages, add_generation_prompt, tokenize):
        assert add_generation_prompt and not tokenize
        return "|".join(f"{m['role']}:{m['content']}" for m in messages) + "|assistant:"


def test_requests_are_distinct_and_never_decides_test_prompts():
    reqs = IC.requests()
    assert len(reqs) == len(set(reqs)) == 64
    assert not set(reqs) & set(IC.test_requests())
    assert len(IC.test_requests()) == len(set(IC.test_requests())) == 72


def test_every_style_asks_every_condition_and_each_concept_pairs_two_of_them():
    for style in IC.STYLES.values():
        assert set(style) == {c for pair in IC.CONCEPTS.values() for c in pair}
    assert all(p != n for p, n in IC.CONCEPTS.values())
    assert IC.prompt_for(None, "text", "none", "Why?") == "Question: Why?\nAnswer:"
    shot = IC.prompt_for(Joiner(), "shot", "refuse", "Why?")
    assert shot == (f"system:{IC.CHAT['refuse']}|user:{IC.EXAMPLE_REQUEST}|assistant:{IC.SHOT['refuse']}|user:Why?|"
                    "assistant:")
    assert IC.prompt_for(Joiner(), "shot", "none", "Why?").startswith(f"user:{IC.EXAMPLE_REQUEST}|")
    assert IC.EXAMPLE_REQUEST not in IC.requests()
    with pytest.raises(ValueError, match="valid: chat, text, shot"):
        IC.prompt_for(None, "html", "none", "Why?")


def test_the_refusal_detector_reads_the_head_and_its_auc_is_the_rate_difference():
    assert IC.is_refusal("I'm sorry, but I can't help you bake a cake.")
    assert not IC.is_refusal("Sure, here is how to bake a cake.")
    assert not IC.is_refusal("x" * IC.HEAD_CHARS + " I'm sorry")
    pos = ["I'm sorry, but no."] * 7 + ["Here you go."]
    neg = ["Here you go."] * 5 + ["Unfortunately, I cannot."]
    assert IC.refusal_auc(pos, neg) == pytest.approx(0.5 + (7 / 8 - 1 / 6) / 2)


def test_folds_are_by_request_so_both_sides_of_a_request_are_held_out_together():
    reqs = IC.requests()
    folds = [IC.fold_of(r) for r in reqs]
    assert set(folds) == set(range(IC.FOLDS)) and folds == [IC.fold_of(r) for r in reqs]
    assert IC.fold_of(reqs[0], seed=1) in range(IC.FOLDS)


def test_the_answer_judge_auc_matches_a_logistic_regression_fitted_by_hand():
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(0)
    reqs = [f"request {i}" for i in range(24)]
    words = ("happy", "sad", "day", "the", "walk")
    pos = [" ".join(rng.choice(words, 8, p=[.4, .1, .2, .2, .1])) for _ in reqs]
    neg = [" ".join(rng.choice(words, 8, p=[.1, .4, .2, .2, .1])) for _ in reqs]
    enc = WordEncoder()
    got = IC.answer_judge_auc(pos, neg, reqs, reqs, encoder=enc)
    folds = np.array([IC.fold_of(r) for r in reqs])
    x_p, x_n = enc.encode(pos).astype(float), enc.encode(neg).astype(float)
    sp, sn = np.zeros(24), np.zeros(24)
    for k in range(IC.FOLDS):
        tr, te = folds != k, folds == k
        clf = LogisticRegression(C=1.0, class_weight="balanced", max_iter=2000, random_state=0)
        clf.fit(np.vstack([x_p[tr], x_n[tr]]), [1] * tr.sum() + [0] * tr.sum())
        sp[te], sn[te] = clf.predict_proba(x_p[te])[:, 1], clf.predict_proba(x_n[te])[:, 1]
    want = roc_auc_score([1] * 24 + [0] * 24, np.concatenate([sp, sn]))
    assert got["auc"] == pytest.approx(want, abs=1e-6)
    assert got["n_positive"] == got["n_negative"] == 24 and len(got["fold_aucs"]) == IC.FOLDS
    assert 0.7 < got["auc"] <= 1.0


def test_vader_separates_cheerful_from_gloomy_answers():
    assert IC.vader_auc(["What a wonderful, happy day!"], ["A sad, miserable day."], "positive") == 1.0
    assert IC.vader_auc(["What a wonderful, happy day!"], ["A sad, miserable day."], "negative") == 0.0


def _answers(n: int) -> tuple[list[str], list[str]]:
    return ([f"What a lovely plan number {i}, you will love it!" for i in range(n)],
            [f"Plan number {i} will probably disappoint you." for i in range(n)])


def test_a_concept_of_answers_loads_in_bench_decide(tmp_path):
    from geosteer.bench.decide_concepts import ADMISSION_TEXTS, by_name

    pos, neg = _answers(64)
    doc = IC.concept_doc("positive-sentiment", pos + ["  ", pos[0]], neg)
    assert doc["positive"] == pos and doc["prompts"] == IC.test_requests()
    path = tmp_path / "answers.json"
    path.write_text(json.dumps([doc]))
    (dc,) = by_name(None, str(path), bundled=False)
    assert dc.name == "positive-sentiment" and dc.concept.description == "happy, positive feelings"
    assert len(dc.admission["positive"]) == ADMISSION_TEXTS and set(dc.admission["positive"]) <= set(pos)


@pytest.mark.parametrize("doc, needle", [
    ({"positive": ["only one answer"] * 1}, "positive"),
    ({"direction": "sideways"}, "direction"),
    ({"positive": _answers(30)[0], "negative": _answers(30)[1]}, "needs >="),
])
def test_a_malformed_answer_file_is_refused_in_one_line_before_any_model_loads(monkeypatch, capsys, tmp_path,
                                                                                doc, needle):
    pos, neg = _answers(64)
    bad = {**IC.concept_doc("positive-sentiment", pos, neg), **doc}
    (tmp_path / "bad.json").write_text(json.dumps([bad]))
    monkeypatch.chdir(tmp_path)
    forbid_model_builds(monkeypatch)
    code, _, err = run_cli(monkeypatch, capsys, "bench", "decide", "--dry-run", "--concepts", "bad.json",
                           "--out", "x")
    one_line_exit_2(code, err)
    assert needle in err


@pytest.mark.parametrize("path", CONCEPT_FILES, ids=[p.name for p in CONCEPT_FILES])
def test_the_committed_concept_files_load_in_bench_decide(path):
    from geosteer.bench.decide_concepts import by_name

    got = by_name(None, str(path), bundled=False)
    assert got and all(dc.name in IC.CONCEPTS for dc in got)
