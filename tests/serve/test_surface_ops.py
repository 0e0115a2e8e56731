"""A served surfaces layer's arithmetic (value channels, epilogue) against the per-pair reference, with
geosteer's compiled CPU kernels and with PyTorch ops; runs without vLLM (the main suite too)."""

from __future__ import annotations

import pytest
import torch

from geosteer.kernels import exact, ext
from geosteer.kernels.bspline import bspline_basis_reference
from geosteer_vllm import surface_ops

HKV, REP, D, T = 2, 3, 8, 7
GRIDS = [(4, -2.0, 2.0), (2, -1.5, 3.0)]  # two recipes' grids on one layer


@pytest.fixture(params=["compiled", "torch"])
def backend(request, monkeypatch):
    if request.param == "compiled" and ext.get() is None:
        pytest.skip(f"compiled CPU kernels: {ext.status()}")
    monkeypatch.setattr(exact, "USE_EXT", request.param == "compiled")
    return request.param


def _inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(T, HKV * REP, D, generator=g) * 1.5
    k = torch.randn(T, HKV, D, generator=g) * 1.5
    v = torch.randn(T, HKV, D, generator=g)
    return q, k, v


def _channel_attention(q, k, channels):
    """What vLLM's paged attention returns for the channels: causal softmax(q·k/√d) weights of query head
    h on KV head h // REP, applied to every channel; (T, HKV, C, REP, D), and the weights (1, H, T, T)."""
    qg = q.view(T, HKV, REP, D)
    s = torch.einsum("tgrd,jgd->grtj", qg, k) * D ** -0.5
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    a = torch.softmax(s, -1)  # (HKV, REP, T, T)
    o = torch.einsum("grtj,jgcd->tgcrd", a, channels)
    return o, a.reshape(1, HKV * REP, T, T)


def test_value_channels_are_v_then_v_times_each_grids_bases(backend):
    pytest.importorskip("scipy")  # the reference basis (not in the serving environment)
    _, k, v = _inputs()
    ch = surface_ops.value_channels(k, v, GRIDS)
    assert ch.shape == (T, HKV, surface_ops.channel_count(GRIDS), D)
    torch.testing.assert_close(ch[:, :, 0], v)
    c = 1
    for g, lo, hi in GRIDS:
        basis = torch.as_tensor(bspline_basis_reference(k, g, lo, hi), dtype=torch.float32)  # (T, HKV, D, K)
        torch.testing.assert_close(ch[:, :, c:c + g + 3], (v.unsqueeze(-1) * basis).transpose(2, 3),
                                   atol=1e-6, rtol=1e-5)
        c += g + 3


@pytest.mark.parametrize("which", [0, 1])
def test_stock_channel_plus_epilogue_is_modulated_attention(backend, which):
    q, k, v = _inputs(1)
    o, weights = _channel_attention(q, k, surface_ops.value_channels(k, v, GRIDS))
    g, lo, hi = GRIDS[which]
    K = g + 3
    coeff = torch.randn(HKV * REP, D, K, K, generator=torch.Generator().manual_seed(2)) * 0.5
    off = 1 + sum(gg + 3 for gg, _, _ in GRIDS[:which])
    out = o[:, :, 0].reshape(T, HKV * REP, D) + surface_ops.surface_delta(o[:, :, off:off + K], q, coeff, GRIDS[which])
    ref = exact.naive_modulated_attention(weights, q.transpose(0, 1)[None], k.transpose(0, 1)[None],
                                           v.transpose(0, 1)[None], coeff, g, lo, hi)[0]
    delta = (ref - o[:, :, 0].reshape(T, HKV * REP, D)).abs().max()
    assert delta > 1e-2  # the surfaces change the output, so the comparison below can fail
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_zero_surfaces_add_nothing(backend):
    q, k, v = _inputs(3)
    o, _ = _channel_attention(q, k, surface_ops.value_channels(k, v, GRIDS[:1]))
    K = GRIDS[0][0] + 3
    delta = surface_ops.surface_delta(o[:, :, 1:1 + K], q, torch.zeros(HKV * REP, D, K, K), GRIDS[0])
    assert torch.count_nonzero(delta) == 0
