"""The r + 1-slice attention of rank-r surfaces (kernels.low_rank), compiled kernels and PyTorch ops,
against the per-pair reference on C = U Wᵀ: GQA, causal / padding / sliding-window / float masks, soft-capping,
odd lengths and blocks, decoding; and a rank-r bank's cached decoding against full forwards."""

import pytest
import torch

from geosteer.interventions import steer
from geosteer.kernels import exact
from geosteer.kernels.exact import naive_modulated_attention
from geosteer.kernels.low_rank import low_rank_attention, narrow_key_features
from geosteer.manifold.low_rank import factors
from tests.conftest import random_bank, random_ids


@pytest.fixture(params=["compiled", "torch"])
def compiled(request, monkeypatch):
    if request.param == "compiled":
        from geosteer.kernels import ext

        if ext.get() is None:
            pytest.skip(f"compiled kernels unavailable: {ext.status()}")
        return True
    monkeypatch.setattr(exact, "USE_EXT", False)  # the PyTorch path even where the extension is built
    return False


def _reference_weights(q, k, mask, softcap, scaling):
    """Stock attention weights (b, H, L, T) by a plain softmax over the GQA-expanded keys."""
    rep = q.shape[1] // k.shape[1]
    s = torch.einsum("bhid,bhjd->bhij", q.double(), k.double().repeat_interleave(rep, 1)) * scaling
    if softcap is not None:
        s = torch.tanh(s / softcap) * softcap
    if mask is not None:
        s = s + mask.double() if mask.dtype != torch.bool else s.masked_fill(~mask, float("-inf"))
    return torch.nan_to_num(torch.softmax(s, -1), nan=0.0)


def _mask(kind, b, L, T):
    if kind == "causal":
        return None
    m = torch.ones(b, 1, L, T, dtype=torch.bool).tril(T - L)
    if kind == "window":
        m &= ~torch.ones(L, T, dtype=torch.bool).tril(T - L - 4)
    if kind == "padding":
        m[-1, :, :, :3] = False  # left padding of the last row
        m[-1, :, 0, :] = False  # and a fully masked query row
    if kind == "float":
        return torch.zeros(b, 1, L, T).masked_fill(~m, torch.finfo(torch.float32).min)
    return m


CASES = [  # kind, (b, H, Hkv, L, T, d), softcap, block, rank
    ("causal", (2, 6, 2, 23, 23, 8), None, 7, 2),
    ("padding", (2, 6, 3, 19, 19, 8), None, 5, 1),
    ("window", (1, 4, 1, 21, 21, 8), None, 8, 3),
    ("float", (1, 4, 4, 13, 13, 8), 20.0, 4, 2),
    ("padding", (2, 6, 2, 3, 17, 8), 5.0, 128, 2),  # decoding: 3 new queries over 17 keys
    ("padding", (1, 6, 2, 1, 9, 8), None, 128, 4),
]


@pytest.mark.parametrize("kind,shape,softcap,block,rank", CASES)
def test_low_rank_attention_matches_per_pair_reference(kind, shape, softcap, block, rank, compiled):
    b, H, Hkv, L, T, d = shape
    g = torch.Generator().manual_seed(rank)
    q = torch.randn(b, L, H, d, generator=g).transpose(1, 2) * 2  # transformers' (non-contiguous) layout
    k, v = torch.randn(b, Hkv, T, d, generator=g) * 2, torch.randn(b, Hkv, T, d, generator=g)
    U, W = factors(torch.randn(H, d, 11, 11, generator=g) * 0.5, rank)
    mask, scaling = _mask(kind, b, L, T), 0.3
    w = _reference_weights(q, k, mask if mask is not None else torch.ones(L, T, dtype=torch.bool).tril(), softcap,
                           scaling)
    ref = naive_modulated_attention(w.float(), q, k, v, U @ W.transpose(-1, -2), 8, -4.0, 4.0)
    kw = dict(attn_mask=mask, is_causal=kind == "causal", scaling=scaling, softcap=softcap, block=block,
              compiled=compiled)
    out = low_rank_attention(q, k, v, U, W, 8, -4.0, 4.0, **kw)
    assert out.shape == (b, L, H, d)
    assert (out - ref).abs().max().item() <= 1e-5
    stock = torch.einsum("bhij,bhjd->bihd", w.float(), v.repeat_interleave(H // Hkv, 1))
    delta = low_rank_attention(q, k, v, U, W, 8, -4.0, 4.0, with_value=False, **kw)
    assert (delta - (ref - stock)).abs().max().item() <= 1e-5
    feats = narrow_key_features(k, v, W, 8, -4.0, 4.0, compiled=compiled)
    again = low_rank_attention(q, k, v, U, W, 8, -4.0, 4.0, features=feats, **kw)
    assert (again - out).abs().max().item() <= 1e-6


FLASH_CASES = [  # (b, H, Hkv, L, T, d), causal, softcap, (query rows, key columns) of the tiles
    ((2, 6, 2, 45, 45, 8), True, None, (7, 12)),  # many tiles, odd tails, the diagonal in every block
    ((1, 4, 1, 45, 45, 8), True, 5.0, (64, 256)),  # one tile
    ((1, 6, 3, 3, 50, 8), False, None, (2, 16)),  # decoding without a mask: a few queries over all keys
    ((1, 4, 2, 20, 33, 8), False, 20.0, (8, 8)),
]


@pytest.mark.parametrize("shape,causal,softcap,tiles", FLASH_CASES)
def test_flash_kernel_matches_per_pair_reference(shape, causal, softcap, tiles, monkeypatch):
    """The compiled flash-style kernel (no mask: causal or none) on tiles that do not divide the lengths."""
    from geosteer.kernels import ext, low_rank

    if ext.get() is None or not hasattr(ext.get(), "feature_flash"):
        pytest.skip(f"compiled kernels unavailable: {ext.status()}")
    monkeypatch.setattr(low_rank, "FLASH_BLOCKS", tiles)
    b, H, Hkv, L, T, d = shape
    g = torch.Generator().manual_seed(L)
    q = torch.randn(b, L, H, d, generator=g).transpose(1, 2) * 2
    k, v = torch.randn(b, Hkv, T, d, generator=g) * 2, torch.randn(b, Hkv, T, d, generator=g)
    U, W = factors(torch.randn(H, d, 11, 11, generator=g) * 0.5, 2)
    visible = torch.ones(L, T, dtype=torch.bool).tril() if causal else torch.ones(L, T, dtype=torch.bool)
    w = _reference_weights(q, k, visible, softcap, 0.3)
    ref = naive_modulated_attention(w.float(), q, k, v, U @ W.transpose(-1, -2), 8, -4.0, 4.0)
    out = low_rank_attention(q, k, v, U, W, 8, -4.0, 4.0, is_causal=causal, scaling=0.3, softcap=softcap)
    assert (out - ref).abs().max().item() <= 1e-5
    delta = low_rank_attention(q, k, v, U, W, 8, -4.0, 4.0, is_causal=causal, scaling=0.3, softcap=softcap,
                               with_value=False)
    stock = torch.einsum("bhij,bhjd->bihd", w.float(), v.repeat_interleave(H // Hkv, 1))
    assert (delta - (ref - stock)).abs().max().item() <= 1e-5


@pytest.mark.parametrize("per_kv_head", [False, True])
def test_flash_kernel_is_softmax_times_features(per_kv_head):
    """ext.feature_flash = softmax(s·q kᵀ) f for any features f, per query head or per KV head (GQA rows stacked)."""
    from geosteer.kernels import ext

    if ext.get() is None or not hasattr(ext.get(), "feature_flash"):
        pytest.skip(f"compiled kernels unavailable: {ext.status()}")
    g = torch.Generator().manual_seed(7)
    b, H, Hkv, L, T, d, W = 2, 6, 2, 19, 19, 8, 13
    q, k = torch.randn(b, H, L, d, generator=g), torch.randn(b, Hkv, T, d, generator=g)
    f = torch.randn(b, Hkv if per_kv_head else H, T, W, generator=g)
    w = _reference_weights(q, k, torch.ones(L, T, dtype=torch.bool).tril(), None, 0.4)
    ref = w @ f.double().repeat_interleave(H // f.shape[1], 1)
    out = ext.get().feature_flash(q, k, f, 0.4, 0.0, True, 4, 5)
    assert (out - ref).abs().max().item() <= 1e-5


def test_compiled_features_equal_the_pytorch_ones():
    from geosteer.kernels import ext

    if ext.get() is None:
        pytest.skip(f"compiled kernels unavailable: {ext.status()}")
    g = torch.Generator().manual_seed(5)
    k, v = torch.randn(2, 3, 11, 16, generator=g) * 3, torch.randn(2, 3, 11, 16, generator=g)
    k[0, 0, 0, :3] = torch.tensor([-4.0, 4.0, 100.0])  # the support's ends and far outside it
    _, W = factors(torch.randn(6, 16, 7, 7, generator=g), 2)
    a = narrow_key_features(k, v, W, 4, -4.0, 4.0, compiled=True)
    b = narrow_key_features(k, v, W, 4, -4.0, 4.0, compiled=False)
    assert a.shape == (2, 6, 11, 3 * 16) and (a - b).abs().max().item() <= 1e-6 * b.abs().max().item()


@pytest.mark.parametrize("family,compiled", [("gemma3", "compiled"), ("llama", "torch")], indirect=["compiled"])
def test_cached_decoding_equals_full_forwards(family, compiled, tiny_model):  # gemma3: GQA, sliding window
    model, _ = tiny_model(family)
    bank = random_bank(model, seed=4, grid_size=4, grid_range=(-3.0, 3.0)).low_rank(2, narrow=True)
    ids = random_ids(2, 9, seed=3)
    with torch.no_grad(), steer(model, bank):
        full = model(ids, use_cache=False).logits
        out = model(ids[:, :5], use_cache=True)
        steps = [out.logits]
        for i in range(5, 9):
            out = model(ids[:, i : i + 1], cache=out.past_key_values, use_cache=True)
            steps.append(out.logits)
        cached = [c for key, c in bank._caches.items() if isinstance(key, tuple) and c.f is not None]
    assert cached  # the narrow features were kept across steps (all 9 keys on a full-attention layer)
    assert max(c.end - c.start for c in cached) == 9
    assert (torch.cat(steps, 1) - full).abs().max().item() <= 1e-4
