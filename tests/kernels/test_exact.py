"""The exact factored kernel (kernels.exact) against the per-pair reference: masks (causal, padding, window,
additive, decode), query blocks, Δo only, fully masked rows, per-layer ranges, gradients, every grid size;
the compiled CPU kernels against the PyTorch path."""

import pytest
import torch

from geosteer.attention import AttentionCall, attention_weights
from geosteer.kernels import exact, ext
from geosteer.kernels.exact import modulated_attention, naive_modulated_attention
from geosteer_paper.reproduction.references import keep_mask


class _Mod(torch.nn.Module):
    is_causal = True


def _case(b, H, Hkv, L, T, d, seed=0, scale=2.0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, H, L, d, generator=g) * scale
    k = torch.randn(b, Hkv, T, d, generator=g) * scale
    v = torch.randn(b, Hkv, T, d, generator=g)
    C = torch.randn(H, d, 11, 11, generator=g) * 0.5
    return q, k, v, C


def _ref(q, k, v, C, mask, lo=-4.0, hi=4.0):
    w = attention_weights(AttentionCall(_Mod(), q, k, v, mask, None, 0.0))
    return naive_modulated_attention(w, q, k, v, C, 8, lo, hi)


@pytest.fixture(params=["torch", "torch-nograd", "ext"])
def path(request, monkeypatch):
    """Run a kernel test on the autograd PyTorch path, the inference PyTorch path and the compiled one."""
    if request.param == "ext":
        if ext.get() is None:
            pytest.skip(f"compiled kernels {ext.status()}")
        with torch.no_grad():
            yield request.param
        return
    monkeypatch.setattr(exact, "USE_EXT", False)
    if request.param == "torch-nograd":
        with torch.no_grad():
            yield request.param
    else:
        yield request.param


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("block", [5, 16, 128])
@pytest.mark.parametrize("kind", ["causal", "padding", "window", "float", "decode", "none"])
def test_kernel_exact_vs_per_pair_reference(kind, block, fused, path):
    b, H, Hkv, d = 2, 6, 2, 8  # GQA 3
    L = T = 23
    if kind == "decode":
        L = 3
    q, k, v, C = _case(b, H, Hkv, L, T, d)
    mask, causal = None, False
    if kind == "causal":
        causal = True
    elif kind == "padding":
        mask = keep_mask(b, L, T, [0, 5])
    elif kind == "window":
        mask = keep_mask(b, L, T, [2, 0], window=6)
    elif kind == "float":
        bm = keep_mask(b, L, T, [0, 4])
        mask = torch.zeros(bm.shape).masked_fill(~bm, torch.finfo(torch.float32).min)
    elif kind == "decode":
        mask = keep_mask(b, L, T, [0, 3])
    ref = _ref(q, k, v, C, mask) if kind != "none" else _ref_nomask(q, k, v, C)
    out = modulated_attention(q, k, v, C, 8, -4.0, 4.0, attn_mask=mask, is_causal=causal, block=block,
                              with_value=fused)
    if not fused:
        w = attention_weights(AttentionCall(_Mod(), q, k, v, mask, None, 0.0)) if kind != "none" else \
            torch.softmax(q @ k.repeat_interleave(3, 1).transpose(-1, -2) * d ** -0.5, -1)
        out = out + (w @ v.repeat_interleave(3, 1)).transpose(1, 2)
    assert out.shape == (b, L, H, d)
    if kind == "float":  # fully masked rows: an additive mask averages them (as SDPA does); skip those
        seen = (mask > torch.finfo(torch.float32).min / 2).any(-1)[:, 0]  # (b, L)
        out, ref = out[seen], ref[seen]
    assert (out - ref).abs().max().item() <= 1e-5


def _ref_nomask(q, k, v, C):
    H, d = q.shape[1], q.shape[3]
    rep = H // k.shape[1]
    w = torch.softmax(q @ k.repeat_interleave(rep, 1).transpose(-1, -2) * d ** -0.5, -1)
    return naive_modulated_attention(w, q, k, v, C, 8, -4.0, 4.0)


def test_kernel_fully_masked_rows_give_zero_and_per_layer_range(path):
    q, k, v, C = _case(2, 4, 4, 9, 9, 4)
    mask = keep_mask(2, 9, 9, [0, 4])
    mask[1, :, :4, :] = False  # padded query rows see nothing
    out = modulated_attention(q, k, v, C, 8, -1.5, 2.5, attn_mask=mask, block=4)
    ref = _ref(q, k, v, C, mask, -1.5, 2.5)
    assert torch.isfinite(out).all()
    assert (out - ref).abs().max() <= 1e-5
    assert torch.all(out[1, :4] == 0)


def test_kernel_gradients_match_reference():
    q, k, v, C = _case(1, 4, 2, 7, 7, 4, scale=1.5)
    q, k, v, C = (t.double().requires_grad_() for t in (q, k, v, C))
    out = modulated_attention(q, k, v, C, 8, -4.0, 4.0, is_causal=True, block=3)
    ref = _ref(q, k, v, C, None)
    gw = torch.randn_like(out)
    g1 = torch.autograd.grad((out * gw).sum(), (q, k, v, C))
    g2 = torch.autograd.grad((ref * gw).sum(), (q, k, v, C))
    for a, b in zip(g1, g2, strict=True):
        assert (a - b).abs().max() <= 1e-9


@pytest.mark.parametrize("causal", [True, False])
def test_compiled_kernel_gradients_match_pytorch_path(monkeypatch, causal):
    if ext.get() is None:
        pytest.skip(f"compiled kernels {ext.status()}")
    q, k, v, C = _case(2, 6, 2, 21 if causal else 3, 21, 8)
    q, k, v, C = (t.requires_grad_() for t in (q, k, v, C))
    gw = torch.randn(q.shape[0], q.shape[2], q.shape[1], q.shape[3])
    res = []
    for use in (True, False):
        monkeypatch.setattr(exact, "USE_EXT", use)
        out = modulated_attention(q, k, v, C, 8, -4.0, 4.0, is_causal=causal, block=8)
        res.append((out, *torch.autograd.grad((out * gw).sum(), (q, k, v, C))))
    for a, b in zip(*res, strict=True):
        assert (a - b).abs().max().item() <= 1e-5 * max(1.0, b.abs().max().item())


@pytest.mark.parametrize("grid", [2, 5, 6, 8, 13, 14, 21, 22])
def test_kernel_every_grid_size_matches_reference(grid, path):
    """The compiled epilogue has vector paths for K <= 8, 16, 24 and a scalar one above: all exact."""
    g = torch.Generator().manual_seed(grid)
    b, H, Hkv, L, d = 2, 6, 3, 19, 8
    K = grid + 3
    q = torch.randn(b, H, L, d, generator=g) * 3.0  # some coordinates outside (-4, 4) and its support
    k = torch.randn(b, Hkv, L, d, generator=g) * 3.0
    v = torch.randn(b, Hkv, L, d, generator=g)
    C = torch.randn(H, d, K, K, generator=g) * 0.5
    out = modulated_attention(q, k, v, C, grid, -4.0, 4.0, is_causal=True, block=7)
    scores = q @ k.repeat_interleave(2, 1).transpose(-1, -2) * d ** -0.5
    w = torch.softmax(scores.masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), float("-inf")), -1)
    ref = naive_modulated_attention(w, q, k, v, C, grid, -4.0, 4.0)
    assert (out - ref).abs().max().item() <= 1e-5 * max(1.0, ref.abs().max().item())
