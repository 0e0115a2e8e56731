"""Rank-r surfaces (SurfaceBank.low_rank): exact at full rank, truncation and discarded energy against
numpy's SVD, next-token KL against a direct computation."""

from functools import partial

import numpy as np
import pytest
import torch

from geosteer.interventions import steer
from geosteer.manifold.low_rank import next_token_kl, rank_report, truncate
from tests.conftest import random_bank, sample_ids

_bank = partial(random_bank, grid_size=4, grid_range=(-3.0, 3.0))


def test_full_rank_reproduces_the_bank(tiny_model):
    model, tok = tiny_model("llama")
    bank = _bank(model)
    full = bank.low_rank(bank.K)
    assert (full.coefficients - bank.coefficients).abs().max().item() <= 1e-5
    assert max(full.meta["low_rank"]["discarded_energy"]) <= 1e-12
    ids = sample_ids(tok, 1)
    with torch.no_grad(), steer(model, bank):
        a = model(ids).logits
    with torch.no_grad(), steer(model, full):
        b = model(ids).logits
    assert (a - b).abs().max().item() <= 1e-4
    assert next_token_kl(model, bank, full, ids) <= 1e-8


@pytest.mark.parametrize("rank", [1, 3])
def test_truncation_matches_numpy_svd(rank):
    g = torch.Generator().manual_seed(1)
    c = torch.randn(2, 3, 4, 7, 7, generator=g)
    c[1] = 0.0  # an all-zero layer: nothing to discard
    kept, energy = truncate(c, rank)
    for li in range(2):
        num = den = 0.0
        for h in range(3):
            for d in range(4):
                u, s, vh = np.linalg.svd(c[li, h, d].double().numpy())
                want = (u[:, :rank] * s[:rank]) @ vh[:rank]
                assert np.abs(kept[li, h, d].double().numpy() - want).max() <= 1e-5
                assert np.linalg.matrix_rank(kept[li, h, d].double().numpy(), tol=1e-5) <= rank
                num, den = num + (s[rank:] ** 2).sum(), den + (s ** 2).sum()
        assert energy[li].item() == pytest.approx(num / den if den else 0.0, abs=1e-6)
    with pytest.raises(ValueError, match="rank must be an integer in 1 … 7"):
        truncate(c, 8)


def test_rank_report_kl_against_direct_computation(tiny_model):
    model, tok = tiny_model("qwen3")
    bank = _bank(model, seed=2)
    ids = sample_ids(tok, 1)
    rows = rank_report(model, bank, [1, 2], ids)
    approx = bank.low_rank(1)
    with torch.no_grad(), steer(model, bank):
        p = torch.softmax(model(ids).logits.double(), -1)
    with torch.no_grad(), steer(model, approx):
        q = torch.softmax(model(ids).logits.double(), -1)
    direct = float((p * (p.log() - q.log())).sum(-1).mean())
    assert rows[0]["next_token_kl"] == pytest.approx(direct, rel=1e-3, abs=1e-7)
    assert rows[0]["next_token_kl"] > 0 and rows[0]["discarded_energy"] > rows[1]["discarded_energy"] > 0


def _case(b, H, Hkv, L, T, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, H, L, d, generator=g) * 2
    k = torch.randn(b, Hkv, T, d, generator=g) * 2
    v = torch.randn(b, Hkv, T, d, generator=g)
    C = torch.randn(H, d, 11, 11, generator=g) * 0.5
    return q, k, v, C


@pytest.mark.parametrize("kind", ["causal", "padding", "decode"])
def test_low_rank_attention_matches_per_pair_reference(kind):
    from geosteer.attention import AttentionCall, attention_weights
    from geosteer.kernels.exact import naive_modulated_attention
    from geosteer.kernels.low_rank import low_rank_attention
    from geosteer.manifold.low_rank import factors

    class Mod(torch.nn.Module):
        is_causal = True

    L, T = (3, 23) if kind == "decode" else (23, 23)
    q, k, v, C = _case(2, 6, 2, L, T, 8)  # GQA 3
    mask = None
    if kind != "causal":
        mask = torch.ones(2, 1, L, T, dtype=torch.bool).tril(T - L)
        mask[1, :, :, :5] = False
    U, W = factors(C, 2)
    out = low_rank_attention(q, k, v, U, W, 8, -4.0, 4.0, attn_mask=mask, is_causal=kind == "causal", block=7)
    w = attention_weights(AttentionCall(Mod(), q, k, v, mask, None, 0.0))
    ref = naive_modulated_attention(w, q, k, v, U @ W.transpose(-1, -2), 8, -4.0, 4.0)
    assert (out - ref).abs().max().item() <= 1e-5
    assert (truncate(C[None], 2)[0][0] - U @ W.transpose(-1, -2)).abs().max().item() <= 1e-5


def test_low_rank_bank_runs_the_narrow_path_with_the_truncated_values(tiny_model):
    model, tok = tiny_model("mistral")  # GQA 4, sliding window
    bank = _bank(model, seed=3)
    approx = bank.low_rank(2)  # the r + 1-slice path is the default
    assert approx.rank == 2 and bank.rank is None and bank.low_rank(2, narrow=False).rank is None
    exact_path = approx.low_rank(approx.K)  # the same (already rank-2) coefficients on the exact kernels
    assert exact_path.rank is None
    enc = tok(["The laws of physics are the same for all.", "She saw the man."], return_tensors="pt", padding=True)
    with torch.no_grad():
        with steer(model, approx):
            a = model(**enc).logits
            gen = model.generate(enc.input_ids[:1], max_new_tokens=4, do_sample=False)
        with steer(model, exact_path):
            b = model(**enc).logits
            gen_ref = model.generate(enc.input_ids[:1], max_new_tokens=4, do_sample=False)
    assert approx._factors and not exact_path._factors  # the factors of the narrow path were used
    keep = enc.attention_mask.bool()
    assert (a - b)[keep].abs().max().item() <= 1e-4
    assert torch.equal(gen, gen_ref)  # cached decoding on the narrow path
