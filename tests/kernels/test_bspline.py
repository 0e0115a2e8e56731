"""The B-spline basis (kernels.bspline): dense form against scipy, conventions, per-row ranges, the local form,
gradients."""

import numpy as np
import pytest
import torch

from geosteer.kernels.bspline import bspline_basis, bspline_basis_reference, bspline_local


@pytest.mark.parametrize("g,lo,hi", [(8, -4.0, 4.0), (1, -1.0, 2.0), (16, -3.0, 5.0), (5, 0.5, 0.75)])
def test_basis_matches_scipy(g, lo, hi):
    h = (hi - lo) / g
    x = torch.linspace(lo - 4 * h, hi + 4 * h, 3001, dtype=torch.float64)
    x = torch.cat([x, torch.tensor([lo - 3 * h, hi + 3 * h, lo, hi, lo + h])])  # knots and support ends
    ours = bspline_basis(x, g, lo, hi).numpy()
    ref = bspline_basis_reference(x.numpy(), g, lo, hi)
    assert ours.shape == (x.numel(), g + 3)
    np.testing.assert_allclose(ours, ref, atol=1e-12)
    # float32 too
    ours32 = bspline_basis(x.float(), g, lo, hi).double().numpy()
    np.testing.assert_allclose(ours32, ref, atol=2e-6)


def test_basis_conventions():
    g, lo, hi = 8, -4.0, 4.0
    K = g + 3
    # B_a centred at lo + (a - 1) h: row 5 centred at 0 for a symmetric range
    centres = torch.tensor([lo + (a - 1) * 1.0 for a in range(K)], dtype=torch.float64)
    B = bspline_basis(centres, g, lo, hi)
    assert torch.allclose(B.diagonal(), torch.full((K,), 2 / 3, dtype=torch.float64))
    assert float(bspline_basis(torch.tensor([0.0]), g, lo, hi)[0].argmax()) == 5
    # partition of unity inside [lo, hi], zero outside the support
    inside = torch.linspace(lo, hi - 1e-9, 500, dtype=torch.float64)
    assert torch.allclose(bspline_basis(inside, g, lo, hi).sum(-1), torch.ones(500, dtype=torch.float64))
    outside = torch.tensor([lo - 3.0 - 1e-9, hi + 3.0, 1e6, -1e6, float("inf")], dtype=torch.float64)
    assert torch.all(bspline_basis(outside, g, lo, hi) == 0)


def test_basis_tensor_ranges_broadcast():
    x = torch.randn(3, 50, dtype=torch.float64) * 3
    lo = torch.tensor([-4.0, -2.0, -1.0], dtype=torch.float64)[:, None]
    hi = torch.tensor([4.0, 3.0, 1.5], dtype=torch.float64)[:, None]
    out = bspline_basis(x, 8, lo, hi)
    for i in range(3):
        ref = bspline_basis_reference(x[i].numpy(), 8, float(lo[i]), float(hi[i]))
        np.testing.assert_allclose(out[i].numpy(), ref, atol=1e-12)


def test_local_form_matches_dense():
    x = torch.randn(1000, dtype=torch.float64) * 5
    a0, w = bspline_local(x, 8, -4.0, 4.0)
    dense = torch.zeros(1000, 11 + 6, dtype=torch.float64)
    dense.scatter_(1, (a0 + 3)[:, None] + torch.arange(4), w)
    assert torch.allclose(dense[:, 3:14], bspline_basis(x, 8, -4.0, 4.0))


def test_basis_gradient_matches_finite_differences():
    x = (torch.randn(40, dtype=torch.float64) * 3).requires_grad_()
    c = torch.randn(11, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda t: bspline_basis(t, 8, -4.0, 4.0) @ c, (x,))
