"""The batched measurements against one prompt at a time (plain generate / a forward per text); the
repeated-4-gram share against hand values."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from geosteer.bench.scoring import continue_prompts, next_token_logprobs, repeated_ngram_share, text_logprob
from geosteer.eval.generation import generate, prompt_ids
from geosteer.interventions import steer
from tests.conftest import random_bank

PROMPTS = ["Tell me about your day.", "Hi", "What should I cook tonight for my family?"]


def test_batched_greedy_is_greedy_one_prompt_at_a_time_with_surfaces(tiny_model):
    model, tok = tiny_model("llama")
    bank = random_bank(model, scale=0.3)
    with steer(model, bank):
        got = continue_prompts(model, tok, PROMPTS, 6)
        want = [generate(model, tok, p, 6, greedy=True, add_bos=True).token_ids for p in PROMPTS]
    assert got.ids == [w[:len(g)] for g, w in zip(got.ids, want, strict=True)]
    assert all(len(g) == 6 or w[len(g)] == tok.eos_token_id for g, w in zip(got.ids, want, strict=True))


def test_batched_logprobs_match_one_forward_per_item(tiny_model):
    model, tok = tiny_model("llama")
    seqs = [[45, 230, 87], [], [12, 600, 33, 9, 700]]
    got = text_logprob(model, tok, seqs)
    assert np.isnan(got[1])
    for i in (0, 2):
        x = torch.tensor([[tok.bos_token_id, *seqs[i]]])
        with torch.no_grad():
            lp = torch.log_softmax(model(input_ids=x).logits[0, :-1].double(), -1)
        want = float(lp[torch.arange(len(seqs[i])), x[0, 1:]].mean())
        assert abs(got[i] - want) < 1e-4
    rows = next_token_logprobs(model, tok, PROMPTS)
    for i, p in enumerate(PROMPTS):
        with torch.no_grad():
            want = torch.log_softmax(model(input_ids=prompt_ids(tok, p, True)).logits[0, -1].float(), -1)
        torch.testing.assert_close(rows[i], want, atol=1e-4, rtol=0)


def test_repeats_against_hand_values():
    assert repeated_ngram_share([1, 2, 3, 4, 1, 2, 3, 4]) == pytest.approx(1 / 5)
    assert repeated_ngram_share([1, 2, 3]) == 0.0
