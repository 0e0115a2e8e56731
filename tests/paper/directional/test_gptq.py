"""GPTQ (``geosteer_paper.directional.gptq``) against the paper's update written as a naive OBS loop (explicit
inverse Hessian, one column at a time, no Cholesky, no blocks), and against round-to-nearest."""

import torch

from geosteer_paper.directional.gptq import gptq_quantize, hessian
from geosteer_paper.directional.quant_grid import fake_quant, group_params, quantize_rtn


def naive_obs_gptq(w, h, bits, group, percdamp=0.01):
    """GPTQ Eqs. 2-3 (OBQ in a fixed column order): quantise column q, move the rest by
    −(w_q − quant(w_q)) / [H⁻¹]_qq · H⁻¹[q, :], then drop q from H⁻¹ by Gaussian elimination."""
    w = w.clone().double()
    h = h.clone().double()
    dead = torch.diag(h) == 0
    h[dead, dead] = 1.0
    h += percdamp * torch.diag(h).mean() * torch.eye(h.shape[0], dtype=h.dtype)
    w[:, dead] = 0
    hinv = torch.linalg.inv(h)
    out = torch.zeros_like(w)
    for q in range(w.shape[1]):
        if q % group == 0:
            scale, zero = group_params(w[:, q:q + group], bits)
        col = fake_quant(w[:, q:q + 1], scale, zero, bits)[:, 0]
        out[:, q] = col
        d = hinv[q, q]
        w -= ((w[:, q] - col) / d)[:, None] * hinv[q][None]
        hinv = hinv - hinv[:, q:q + 1] @ hinv[q:q + 1, :] / d
    return out


def _correlated(n, d, seed):
    g = torch.Generator().manual_seed(seed)
    mix = torch.randn(d, d, generator=g, dtype=torch.float64) / d ** 0.5 + torch.eye(d, dtype=torch.float64)
    return torch.randn(n, d, generator=g, dtype=torch.float64) @ mix * torch.linspace(0.2, 3.0, d,
                                                                                         dtype=torch.float64)


def test_gptq_equals_the_naive_obs_column_loop():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(6, 32, generator=g, dtype=torch.float64)
    x = _correlated(200, 32, 1)
    x[:, 5] = 0  # a dead input column: its weights go to zero in both
    h = hessian(x)
    ours = gptq_quantize(w, h, bits=3, group=8, blocksize=16)
    ref = naive_obs_gptq(w, h, bits=3, group=8)
    assert torch.allclose(ours, ref, atol=1e-9, rtol=0)
    assert (ours[:, 5] == 0).all()
    # same answer whatever the lazy-batch block size
    assert torch.allclose(gptq_quantize(w, h, bits=3, group=8, blocksize=8), ref, atol=1e-9, rtol=0)


def test_gptq_weights_lie_on_their_group_grid_and_beat_rtn_on_the_layer_output():
    g = torch.Generator().manual_seed(2)
    w = torch.randn(16, 64, generator=g, dtype=torch.float64)
    x = _correlated(400, 64, 3)
    q = gptq_quantize(w, hessian(x), bits=3, group=16)
    for r in range(16):
        for k in range(4):
            assert len(torch.unique(q[r, k * 16:(k + 1) * 16])) <= 8
    err_gptq = ((x @ (q - w).T) ** 2).mean()
    err_rtn = ((x @ (quantize_rtn(w, 3, 16) - w).T) ** 2).mean()
    assert err_gptq < 0.9 * err_rtn  # 0.83 with these seeds
