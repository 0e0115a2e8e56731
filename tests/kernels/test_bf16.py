"""bf16 inputs on the CPU: the surfaces run the compiled fp32 kernels (not the unfused PyTorch path) and match
the per-pair reference, computed in float64 from the same bf16-rounded inputs, to bf16 rounding of the output."""

from __future__ import annotations

import pytest
import torch

from geosteer.kernels import exact, ext

G, LO, HI = 6, -3.0, 3.0
K = G + 3


def _inputs(L: int, T: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 4, L, 16, generator=g).bfloat16()  # GQA: 4 query heads over 2 KV heads
    k = torch.randn(1, 2, T, 16, generator=g).bfloat16()
    v = torch.randn(1, 2, T, 16, generator=g).bfloat16()
    c = torch.randn(4, 16, K, K, generator=g) * 0.3
    return q, k, v, c


def _reference(q, k, v, c, mask: torch.Tensor) -> torch.Tensor:
    """Per-pair sum in float64: softmax weights (q·k/√d, masked) then Σ_j a_ij v_jd (1 + S_d(q_i, k_j))."""
    q64, k64, v64 = q.double(), k.double(), v.double()
    rep = q.shape[1] // k.shape[1]
    scores = q64 @ k64.repeat_interleave(rep, 1).transpose(-1, -2) / q.shape[-1] ** 0.5
    w = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return exact.naive_modulated_attention(w, q64, k64, v64, c.double(), G, LO, HI)


def _assert_bf16_close(got: torch.Tensor, ref: torch.Tensor) -> None:
    assert got.dtype is torch.bfloat16
    err = (got.double() - ref).abs()
    # bf16 keeps 8 significant bits: rounding the output costs at most 2^-8 of it; the fp32 sums add ~1e-6
    # (the same sums done in bf16 miss this bound by two orders of magnitude)
    bound = ref.abs() * 2.0 ** -8 + 1e-5
    assert bool((err <= bound).all()), float((err - bound).max())


@pytest.fixture
def compiled_calls(monkeypatch):
    """Counts the calls of the compiled epilogue (skips where the kernels cannot be built)."""
    if ext.get() is None:
        pytest.skip(f"compiled CPU kernels unavailable: {ext.status()}")
    calls = []
    real = exact.epilogue

    def counted(*args, **kwargs):
        calls.append(args[1].dtype)
        return real(*args, **kwargs)

    monkeypatch.setattr(exact, "epilogue", counted)
    return calls


@pytest.mark.parametrize("L", [37, 5])  # query blocks (odd length, 3 blocks of 16), decode-sized (<= 8)
def test_bf16_causal_matches_per_pair_reference(L, compiled_calls):
    T = 37
    q, k, v, c = _inputs(L, T)
    with torch.no_grad():
        got = exact.modulated_attention(q, k, v, c, G, LO, HI, is_causal=L == T, block=16,
                                         attn_mask=None if L == T else torch.ones(L, T, dtype=torch.bool).tril(T - L))
    mask = torch.ones(L, T, dtype=torch.bool).tril(T - L)
    _assert_bf16_close(got, _reference(q, k, v, c, mask))
    assert compiled_calls and set(compiled_calls) == {torch.float32}  # compiled, fed fp32 from bf16


def test_bf16_decode_with_cached_features(compiled_calls):
    """One new query against 37 cached keys, the key features computed once beforehand (the decode cache)."""
    q, k, v, c = _inputs(1, 37, seed=1)
    feats = exact.key_features(k, v, G, LO, HI)
    assert feats.dtype is torch.float32  # kept in fp32 across decode steps, never re-converted
    with torch.no_grad():
        got = exact.modulated_attention(q, k, v, c, G, LO, HI, features=feats)
    _assert_bf16_close(got, _reference(q, k, v, c, torch.ones(1, 37, dtype=torch.bool)))
    assert compiled_calls


def test_bf16_padding_mask_matches_reference(compiled_calls):
    q, k, v, c = _inputs(20, 20, seed=2)
    mask = torch.ones(20, 20, dtype=torch.bool).tril()
    mask[:, :3] = False  # three left pads
    mask[:3, :3] = torch.eye(3, dtype=torch.bool)  # pad rows see themselves (no fully masked row)
    with torch.no_grad():
        got = exact.modulated_attention(q, k, v, c, G, LO, HI, attn_mask=mask[None, None], block=8)
    _assert_bf16_close(got, _reference(q, k, v, c, mask))
    assert compiled_calls
