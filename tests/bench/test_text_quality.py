"""``geosteer bench text``: the repeated-4-gram share and fluency score of greedy continuations, stock vs
surfaces at a strength, against an independent recomputation; bad input refused before any model loads."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from geosteer import manifold
from geosteer.bench.text_quality import State, bootstrap, everyday_prompts, measure_states
from tests.cli_helpers import refused_before_load, run_cli
from tests.conftest import random_bank

PROMPTS = ["The cat sat on the", "My favourite food is", "Once upon a time"]


def _naive(model, tok, prompt: str, n: int, *ivs) -> tuple[list[int], float]:
    """Greedy continuation one token at a time (full forward each step), its repeated-4-gram share."""
    from geosteer.interventions import steer

    ids = [tok.bos_token_id] + tok(prompt, add_special_tokens=False).input_ids
    out = []
    with torch.no_grad(), steer(model, *ivs):
        for _ in range(n):
            nxt = int(model(torch.tensor([ids + out]), use_cache=False).logits[0, -1].argmax())
            if nxt == tok.eos_token_id:
                break
            out.append(nxt)
    grams = [tuple(out[i:i + 4]) for i in range(len(out) - 3)]
    rep = sum(g in grams[:i] for i, g in enumerate(grams)) / len(grams) if len(grams) > 1 else 0.0
    return out, rep


def test_rows_match_a_naive_greedy_loop_and_strength_0_is_the_stock_model(tiny_model):
    model, tok = tiny_model("llama")
    bank = random_bank(model, seed=3, scale=0.8, grid_size=4, layers=[1, 2])
    states = [State("stock", [], 0.0), State("surfaces", [manifold.SurfaceBank(bank.config)], 0.0),
              State("surfaces", [bank], 1.0)]
    rows = measure_states(model, tok, states, PROMPTS, 12)
    for row, ivs in ((rows[0], []), (rows[2], [bank])):
        reps = [_naive(model, tok, p, 12, *ivs)[1] for p in PROMPTS]
        assert row["repeated_4gram_share"]["mean"] == pytest.approx(float(np.mean(reps)), abs=1e-12)
    assert rows[0]["fluency_score"]["mean"] == pytest.approx(1 - rows[0]["repeated_4gram_share"]["mean"])
    for k in ("repeated_4gram_share", "fluency_score", "logprob"):
        assert rows[1][k]["mean"] == pytest.approx(rows[0][k]["mean"], abs=1e-9)  # zero surfaces: stock
    assert rows[1]["examples"] == rows[0]["examples"]
    assert rows[2]["examples"] != rows[0]["examples"]
    with pytest.raises(ValueError, match="stock"):
        measure_states(model, tok, states[1:], PROMPTS, 8)
    assert len(everyday_prompts()) == 20 and len(set(everyday_prompts())) == 20


def test_cli_writes_rows_and_refuses_bad_input_before_loading(tiny_model, tmp_path, monkeypatch, capsys):
    model, tok = tiny_model("llama")
    art = tmp_path / "surf"
    bank = random_bank(model, seed=1, scale=0.5, grid_size=4, layers=[1])
    manifold.save(bank, art)
    out = tmp_path / "tq.json"
    code, _, err = run_cli(monkeypatch, capsys, "bench", "text", "-m", "tiny-llama", "-s", str(art), "--strengths",
                           "0.5,1", "--new-tokens", "6", "--ppl-tokens", "0", "--threads", "1", "--out", str(out))
    assert code == 0, err
    doc = json.loads(out.read_text())
    assert [(r["state"], r["strength"]) for r in doc["rows"]] == [("stock", 0.0), (str(art), 0.5), (str(art), 1.0)]
    assert doc["meta"]["command"].startswith("geosteer bench text")
    from geosteer.eval.chat import format_prompts

    half = manifold.SurfaceBank(bank.config)  # strength 0.5 by hand: the coefficients halved
    with torch.no_grad():
        half.coefficients.copy_(0.5 * bank.coefficients)
    prompts = format_prompts(tok, list(everyday_prompts()), False, None, True)
    by_hand = measure_states(model, tok, [State("stock", [], 0.0), State("half", [half], 0.5)], prompts, 6)[1]
    assert doc["rows"][1]["examples"] == by_hand["examples"]
    for k in ("repeated_4gram_share", "fluency_score", "logprob"):
        assert doc["rows"][1][k]["mean"] == pytest.approx(by_hand[k]["mean"], abs=1e-6), k
    walled = random_bank(model, seed=1, scale=0.5, grid_size=4, layers=[1])
    walled.set_walls([{"layer": 1, "heads": [0]}])
    manifold.save(walled, tmp_path / "walled")
    base = ["bench", "text", "-m", "tiny-llama"]
    for extra, what in ((["--strengths", "0"], "--strengths"), (["--strengths", "a"], "--strengths"),
                        (["-s", str(tmp_path / "walled"), "--strengths", "0.5,1"], "exact wall"),
                        (["--new-tokens", "2"], "--new-tokens"), (["--ppl-tokens", "100"], "--ppl-tokens"),
                        (["-s", str(tmp_path / "nope")], "nope"), (["--system", "x"], "--chat")):
        assert what in refused_before_load(monkeypatch, capsys, *base, *extra)


def test_bootstrap_against_hand_values():
    b = bootstrap([1.0, 2.0, 3.0, 4.0], n_boot=500, seed=0)
    assert b["mean"] == 2.5 and 1.0 <= b["lo"] < 2.5 < b["hi"] <= 4.0
    assert math.isnan(bootstrap([1.0])["lo"]) and bootstrap([1.0])["mean"] == 1.0
    assert math.isnan(bootstrap([])["mean"])
