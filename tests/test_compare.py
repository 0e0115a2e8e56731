import numpy as np
import torch
from scipy.special import rel_entr

from geosteer.eval.compare import compare_states, first_divergence, kl_divergence, summarize
from geosteer.eval.generation import generate
from geosteer.interventions import ScaleHook, steer


def test_kl_matches_scipy():
    g = torch.Generator().manual_seed(0)
    a = torch.log_softmax(torch.randn(50, generator=g), -1)
    b = torch.log_softmax(torch.randn(50, generator=g), -1)
    ref = rel_entr(a.exp().double().numpy(), b.exp().double().numpy()).sum()
    assert np.isclose(kl_divergence(a, b), ref, rtol=1e-5)
    assert kl_divergence(a, a) == 0.0


def test_first_divergence():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2


def test_compare_identical_states_and_changed_state(tiny_cache):
    model, tok = tiny_cache("llama")
    prompts = ["The theory of relativity", "She saw the man with"]
    same = compare_states(model, tok, prompts, [], [], max_new_tokens=6, sample_seeds=range(2))
    assert all(not r["greedy_changed"] and r["kl"] < 1e-10 and r["sampled_changed_frac"] == 0 for r in same)
    diff = compare_states(model, tok, prompts, [], [ScaleHook("attn_out", -2.0)], max_new_tokens=6)
    assert all(r["kl"] > 1e-3 for r in diff)
    s = summarize(diff)
    assert s["prompts"] == 2 and 0 <= s["greedy_change_rate"] <= 1


def test_seeded_sampling_is_reproducible_and_seed_dependent(tiny_cache):
    model, tok = tiny_cache("llama")
    a = generate(model, tok, "Once upon a time", 12, greedy=False, temperature=1.5, seed=1)
    b = generate(model, tok, "Once upon a time", 12, greedy=False, temperature=1.5, seed=1)
    c = generate(model, tok, "Once upon a time", 12, greedy=False, temperature=1.5, seed=2)
    assert a.token_ids == b.token_ids and a.token_ids != c.token_ids


def test_greedy_generation_uses_interventions(tiny_cache):
    model, tok = tiny_cache("llama")
    ref = generate(model, tok, "Once upon a time", 8)
    with steer(model, ScaleHook("mlp_out", -3.0)):
        alt = generate(model, tok, "Once upon a time", 8)
    assert ref.token_ids != alt.token_ids
    assert generate(model, tok, "Once upon a time", 8).token_ids == ref.token_ids
