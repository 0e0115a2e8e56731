"""The rank-r Triton forward (kernels.triton_low_rank), run on the CPU in Triton's interpreter: against the
per-pair reference on C = U Wᵀ (causal, padding, sliding window, soft-capping, additive mask, GQA, head_dim
not a power of two, odd lengths over several tiles, split-K decoding, ranks 1 to 3, fp32 and bf16), and a rank-2 bank
on the Triton backend against the narrow path in PyTorch ops on a tiny model (with a KV-cache decode step).

As in test_triton.py, the cases need TRITON_INTERPRET=1 from the process start: unless this process has it they
are skipped, and test_triton.py's ``test_interpreter_cases_in_a_subprocess`` runs this file in its child process.
"""

import os

import pytest
import torch

from geosteer.errors import GeosteerError
from geosteer.interventions import steer
from geosteer.kernels.exact import naive_modulated_attention
from geosteer.manifold.low_rank import factors
from geosteer_paper.reproduction.references import keep_mask
from tests.conftest import random_bank

pytest.importorskip("triton")
INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"


@pytest.fixture(scope="module")
def narrow():
    """geosteer.kernels.triton_low_rank with its kernel in the interpreter (only in a TRITON_INTERPRET=1 process)."""
    if not INTERPRETING:
        pytest.skip("needs TRITON_INTERPRET=1 from the start (run by test_interpreter_cases_in_a_subprocess)")
    from geosteer.kernels import triton, triton_low_rank

    assert triton.interpreted()
    return triton_low_rank


def _case(b, H, Hkv, L, T, d, rank, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, L, H, d, generator=g).transpose(1, 2) * 2  # transformers' (non-contiguous) layout
    k, v = torch.randn(b, Hkv, T, d, generator=g) * 2, torch.randn(b, Hkv, T, d, generator=g)
    U, W = factors(torch.randn(H, d, 11, 11, generator=g) * 0.5, rank)
    return q, k, v, U, W


def _ref(q, k, v, U, W, keep, softcap=None, with_value=True):
    """Per-pair reference (fp64): plain softmax over the masked scores, C = U Wᵀ (Δo only: minus A V)."""
    q, k, v = (t.double() for t in (q, k, v))
    rep = q.shape[1] // k.shape[1]
    s = q @ k.repeat_interleave(rep, 1).transpose(-1, -2) * q.shape[-1] ** -0.5
    if softcap is not None:
        s = torch.tanh(s / softcap) * softcap
    if keep is not None:
        s = s.masked_fill(~keep, float("-inf")) if keep.dtype == torch.bool else s + keep.double()
    w = torch.nan_to_num(torch.softmax(s, -1), nan=0.0)
    out = naive_modulated_attention(w, q, k, v, (U @ W.transpose(-1, -2)).double(), 8, -4.0, 4.0)
    if not with_value:
        out = out - torch.einsum("bhij,bhjd->bihd", w, v.repeat_interleave(rep, 1))
    return out


CASES = [  # kind, (b, H, Hkv, L, T, d), rank
    ("causal", (1, 3, 1, 19, 19, 12), 1),  # GQA 3, head_dim 12 (not a power of two), 16-wide tiles
    ("padding", (2, 2, 1, 13, 13, 8), 3),  # left padding, a fully masked query row, Δo only
    ("window", (1, 2, 2, 21, 21, 8), 2),  # sliding_window argument (key tiles skipped), soft-capping
    ("decode", (2, 4, 2, 2, 37, 16), 3),  # 2 new queries over a padded 37-key cache, keys split over 3 programs
]


@pytest.mark.parametrize("kind,shape,rank", CASES)
def test_forward_matches_per_pair_reference(narrow, kind, shape, rank):
    b, H, Hkv, L, T, d = shape
    q, k, v, U, W = _case(b, H, Hkv, L, T, d, rank, seed=rank)
    kw, keep, softcap, with_value = dict(block_m=16, block_n=16), keep_mask(b, L, T, [0] * b), None, True
    if kind == "causal":
        kw["is_causal"] = True
    elif kind == "padding":
        keep = keep_mask(b, L, T, [0, 4])
        keep[1, :, 0, :] = False
        kw["attn_mask"], with_value = keep, False
    elif kind == "window":
        kw.update(is_causal=True, sliding_window=5, softcap=3.0, block_m=8, block_n=8)
        keep, softcap = keep_mask(b, L, T, [0], window=5), 3.0
    else:  # split-K: 3 key chunks, merged
        keep = keep_mask(b, L, T, [0, 7])
        kw.update(attn_mask=keep, split=3)
    out = narrow.low_rank_attention_triton(q, k, v, U, W, 8, -4.0, 4.0, with_value=with_value, **kw)
    assert out.shape == (b, L, H, d) and out.dtype == torch.float32
    ref = _ref(q, k, v, U, W, keep, softcap, with_value)
    assert (out.double() - ref).abs().max().item() <= 1e-5
    if kind == "padding":
        assert torch.all(out[1, 0] == 0)  # the query row that sees no key


def test_additive_mask_bf16_inputs_and_refusals(narrow):
    q, k, v, U, W = _case(2, 2, 1, 11, 11, 8, 2, seed=5)
    pad = keep_mask(2, 11, 11, [0, 3])
    add = torch.zeros(pad.shape).masked_fill(~pad, -1e9)
    out = narrow.low_rank_attention_triton(q, k, v, U, W, 8, -4.0, 4.0, attn_mask=add)
    seen = pad.any(-1)[:, 0]  # fully masked rows: an additive mask averages them (as SDPA does); the rest
    assert (out.double() - _ref(q, k, v, U, W, add))[seen].abs().max().item() <= 1e-5
    qb, kb, vb = q.bfloat16(), k.bfloat16(), v.bfloat16()
    out = narrow.low_rank_attention_triton(qb, kb, vb, U, W, 8, -4.0, 4.0, is_causal=True)
    assert out.dtype == torch.bfloat16
    ref = _ref(qb.float(), kb.float(), vb.float(), U, W, keep_mask(2, 11, 11, [0, 0]))  # same rounded inputs
    # only the output's own bf16 rounding (relative 2^-8) separates the two
    assert ((out.double() - ref).abs() <= ref.abs() * 2 ** -8 + 1e-6).all()
    with pytest.raises(GeosteerError, match="no backward"):
        narrow.low_rank_attention_triton(q.requires_grad_(), k, v, U, W, 8, -4.0, 4.0)
    with pytest.raises(GeosteerError, match=r"U must have shape \(heads, head_dim, K, rank\)"):
        narrow.low_rank_attention_triton(q.detach(), k, v, U[:, :, :7], W, 8, -4.0, 4.0)


def test_rank2_bank_on_the_triton_backend_equals_the_narrow_pytorch_path(narrow, tiny_model, monkeypatch):
    """gemma3's sliding-window layer (GQA, head_dim 32 ≠ d/h): a padded prompt, then one cached decode step.
    The Triton backend runs the narrow kernel (never the exact one) and keeps no feature cache."""
    from geosteer.kernels import triton as fused
    from geosteer.kernels import triton_low_rank

    model, tok = tiny_model("gemma3")
    enc = tok(["The laws of physics are the same for all.", "She saw the man."], return_tensors="pt",
              padding=True)
    bank = random_bank(model, seed=2, grid_size=8, grid_range=(-3.0, 3.0), layers=[1]).low_rank(2)
    calls, real = [], triton_low_rank.low_rank_attention_triton

    def counted(*a, **k):
        calls.append(a[0].shape[2])
        return real(*a, **k)

    monkeypatch.setattr(triton_low_rank, "low_rank_attention_triton", counted)
    monkeypatch.setattr(fused, "_forward", lambda *a, **k: pytest.fail("the exact Triton kernel ran"))
    mask2 = torch.cat((enc.attention_mask, torch.ones(2, 1, dtype=enc.attention_mask.dtype)), 1)
    nxt = torch.tensor([[5], [7]])

    def run():
        out = model(**enc, use_cache=True)
        return out.logits, model(nxt, attention_mask=mask2, past_key_values=out.past_key_values).logits

    with torch.no_grad():
        stock = run()[0]
        with steer(model, bank):
            bank.backend = "triton"
            ours = run()
            assert calls == [enc.input_ids.shape[1], 1] and not bank._caches
            bank.backend = "torch"  # the narrow path in PyTorch ops
            ref = run()
    keep = enc.attention_mask.bool()
    assert (ours[0] - ref[0])[keep].abs().max().item() <= 1e-4
    assert (ours[1] - ref[1]).abs().max().item() <= 1e-4
    assert (ours[0] - stock)[keep].abs().max().item() > 1e-3  # the surfaces change the logits
