"""The judge (a text classifier that never sees the model) and the one operating-point rule."""

from __future__ import annotations

import math

import numpy as np
import pytest

from geosteer.bench.judge import Judge
from geosteer.bench.operating import choose_operating_point
from geosteer.bench.scoring import bootstrap, harmonic, repeated_ngram_share
from tests.bench.conftest import CATS


def test_judge_separates_unseen_texts_and_reads_only_text():
    j = Judge().fit(CATS["positive"], CATS["negative"])
    p = j.prob(["The kitten purred and chased the cat toy.", "The parliament debated the budget today."])
    assert p[0] > 0.5 > p[1]
    assert not any(hasattr(j, a) for a in ("model", "tok", "tokenizer"))
    np.testing.assert_allclose(j.prob(["a cat"]), Judge().fit(CATS["positive"], CATS["negative"]).prob(["a cat"]))


def test_scores_of_the_same_texts_do_not_depend_on_the_steered_model(tiny_model):
    """The concept score is the judge's output on the generated text: two models, same texts, same scores."""
    from geosteer.bench.registry import stock_point
    from geosteer.bench.scoring import measure

    j = Judge().fit(CATS["positive"], CATS["negative"])
    calls = []

    class Recording:
        def prob(self, texts):
            calls.append(list(texts))
            return j.prob(texts)

    model, tok = tiny_model("llama")
    ref = None
    from geosteer.bench.scoring import next_token_logprobs
    ref = next_token_logprobs(model, tok, ["Hello"])
    m = measure(model, tok, stock_point(), ["Tell me"], ["Hello"], Recording(), True, 3, ref,
                lambda p, i=None: p)
    assert calls == [m.texts] and all(isinstance(t, str) for t in calls[0])
    np.testing.assert_allclose(m.concept, j.prob(m.texts))


def _s(score, kl, strength):
    return {"score": {"mean": score}, "control_kl": {"mean": kl}, "strength": strength}


def test_rule_takes_the_best_score_within_the_kl_budget():
    pts = [_s(0.2, 0.0, 0.0), _s(0.5, 0.3, 1.0), _s(0.9, 0.8, 2.0), _s(0.5, 0.1, 3.0)]
    assert choose_operating_point(pts, kl_budget=0.5) == 3  # tie on score: the lower KL
    assert choose_operating_point(pts, kl_budget=1.0) == 2
    assert choose_operating_point(pts, kl_budget=0.05) == 0
    with pytest.raises(ValueError):
        choose_operating_point([_s(0.5, 0.9, 1.0)], kl_budget=0.1)


def test_harmonic_bootstrap_and_repeats_against_hand_values():
    np.testing.assert_allclose(harmonic(np.array([0.5, 0.0, 1.0]), np.array([0.5, 0.0, 0.25])), [0.5, 0.0, 0.4])
    assert repeated_ngram_share([1, 2, 3, 4, 1, 2, 3, 4]) == pytest.approx(1 / 5)
    assert repeated_ngram_share([1, 2, 3]) == 0.0
    b = bootstrap([1.0, 2.0, 3.0, 4.0], n_boot=500, seed=0)
    assert b["mean"] == 2.5 and 1.0 <= b["lo"] < 2.5 < b["hi"] <= 4.0
    assert math.isnan(bootstrap([1.0])["lo"])


def _row(concept, lever, score):
    d = {"mean": score, "lo": score, "hi": score}
    return {"concept": concept, "lever": lever, "score": d, "concept_score": d, "control_kl": d, "params": 0,
            "fluency": {"score": d, "repeated_4gram_share": d}, "operating_point": {"label": lever}}


def test_a_lever_wins_a_concept_only_above_the_stock_model():
    from geosteer.bench.results import pivot_table, summary_table

    rows = [_row("a", "stock", 0.5), _row("a", "x", 0.6), _row("a", "y", 0.55),
            _row("b", "stock", 0.5), _row("b", "x", 0.5), _row("b", "y", 0.4)]
    wins = {o["lever"]: o["wins"] for o in summary_table(rows)}
    assert wins == {"x": 1, "y": 0, "stock": 0}
    table = pivot_table(rows)
    assert "**0.600**" in table and "**" not in table.splitlines()[-1]
