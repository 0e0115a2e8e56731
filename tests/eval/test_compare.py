import numpy as np
import pytest
import torch
from scipy.special import rel_entr

from geosteer.eval.compare import compare_states, first_divergence, kl_divergence, next_token_logprobs, summarize
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


def test_compare_identical_states_and_changed_state(tiny_model):
    model, tok = tiny_model("llama")
    prompts = ["The theory of relativity", "She saw the man with"]
    same = compare_states(model, tok, prompts, [], [], max_new_tokens=6, sample_seeds=range(2))
    assert all(not r["greedy_changed"] and r["kl"] < 1e-10 and r["sampled_changed_frac"] == 0 for r in same)
    diff = compare_states(model, tok, prompts, [], [ScaleHook("attn_out", -2.0)], max_new_tokens=6)
    assert all(r["kl"] > 1e-3 for r in diff)
    s = summarize(diff)
    assert s["prompts"] == 2 and 0 <= s["greedy_change_rate"] <= 1


def test_seeded_sampling_is_reproducible_and_seed_dependent(tiny_model):
    model, tok = tiny_model("llama")
    a = generate(model, tok, "Once upon a time", 12, greedy=False, temperature=1.5, seed=1)
    b = generate(model, tok, "Once upon a time", 12, greedy=False, temperature=1.5, seed=1)
    c = generate(model, tok, "Once upon a time", 12, greedy=False, temperature=1.5, seed=2)
    assert a.token_ids == b.token_ids and a.token_ids != c.token_ids


def test_greedy_generation_uses_interventions(tiny_model):
    model, tok = tiny_model("llama")
    ref = generate(model, tok, "Once upon a time", 8)
    with steer(model, ScaleHook("mlp_out", -3.0)):
        alt = generate(model, tok, "Once upon a time", 8)
    assert ref.token_ids != alt.token_ids
    assert generate(model, tok, "Once upon a time", 8).token_ids == ref.token_ids


def test_paired_comparison_rows_equal_an_independent_computation(tiny_model):
    """Every field of a row recomputed directly: next-token KL of the two states, greedy generations under
    each, and the seeded samples of each (same seeds) compared one by one; the baseline is computed once and
    reused by every ``run``; ``Prompt`` categories are copied; ``sample=False`` skips the samples."""
    from geosteer.eval.compare import PairedComparison
    from geosteer.eval.generation import generate_seeds
    from geosteer.eval.prompts import Prompt

    model, tok = tiny_model("llama")
    a, b = [ScaleHook("mlp_out", 0.5)], [ScaleHook("attn_out", -2.0)]
    prompts = [Prompt("The theory of relativity", "science"), "She saw the man with"]
    cmp = PairedComparison(model, tok, prompts, a, max_new_tokens=5, seeds=[0, 1, 2], temperature=1.5, top_k=20)
    rows = cmp.run(b)
    for p, row in zip(["The theory of relativity", "She saw the man with"], rows, strict=True):
        lp_a, lp_b = next_token_logprobs(model, tok, p, a), next_token_logprobs(model, tok, p, b)
        with steer(model, *a):
            ga = generate(model, tok, p, 5)
            sa = generate_seeds(model, tok, p, [0, 1, 2], 5, 1.5, 20)
        with steer(model, *b):
            gb = generate(model, tok, p, 5)
            sb = generate_seeds(model, tok, p, [0, 1, 2], 5, 1.5, 20)
        changed = sum(x.token_ids != y.token_ids for x, y in zip(sa, sb, strict=True))
        assert row["prompt"] == p and row["kl"] == kl_divergence(lp_a, lp_b)
        assert row["greedy_changed"] == (ga.token_ids != gb.token_ids)
        assert row["first_divergence"] == first_divergence(ga.token_ids, gb.token_ids)
        assert (row["text_a"], row["text_b"]) == (ga.text, gb.text)
        assert (row["top1_a"], row["top1_b"]) == (tok.decode([int(lp_a.argmax())]), tok.decode([int(lp_b.argmax())]))
        assert (row["sampled_changed"], row["sample_seeds"]) == (changed, 3)
        assert row["sampled_changed_frac"] == changed / 3
    assert rows[0]["category"] == "science" and "category" not in rows[1]
    assert [r["text"] for r in cmp.baseline_rows()] == [r["text_a"] for r in rows]
    same = cmp.run(a, sample=False)  # b = a: nothing changes, no samples drawn
    assert all(not r["greedy_changed"] and r["kl"] == 0.0 and "sampled_changed" not in r for r in same)
    assert compare_states(model, tok, ["She saw the man with"], a, b, max_new_tokens=5, sample_seeds=[0, 1, 2],
                          temperature=1.5, top_k=20) == rows[1:]


def test_summarize_by_groups_then_all():
    from geosteer.eval.compare import summarize_by

    rows = [{"category": c, "greedy_changed": g, "kl": k}
            for c, g, k in [("x", True, 0.5), ("y", False, 0.1), ("x", False, 0.3)]]
    out = summarize_by(rows)
    assert out == [{"category": "x", "prompts": 2, "greedy_change_rate": 0.5, "mean_kl": pytest.approx(0.4)},
                   {"category": "y", "prompts": 1, "greedy_change_rate": 0.0, "mean_kl": 0.1},
                   {"category": "all", "prompts": 3, "greedy_change_rate": 1 / 3, "mean_kl": pytest.approx(0.3)}]
