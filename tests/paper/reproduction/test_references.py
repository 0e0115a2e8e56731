"""The independent references on cases worked out by hand."""

import numpy as np
import pytest
import torch

from geosteer_paper.reproduction.references import (
    finite_difference_tangent_jacobian,
    parallel_speedup_loop,
    projection_coefficients,
    tangential_numpy,
)


def test_projection_tangential_and_speedup_by_hand():
    d = np.array([[3.0, 4.0], [1.0, 1.0]])
    z = np.array([[1.0, 0.0], [2.0, 2.0]])
    assert projection_coefficients(d, z) == pytest.approx([3.0, 0.5])
    u = np.array([[0.0, 1.0, 0.0]])
    assert np.allclose(tangential_numpy(u, np.array([[1.0, 2.0, 3.0]])), [[1.0, 0.0, 3.0]])
    times = [{"layer": 0, "t_attn": 1.0, "t_ffn": 3.0}, {"layer": 1, "t_attn": 2.0, "t_ffn": 2.0}]
    assert parallel_speedup_loop(times, []) == 1.0
    assert parallel_speedup_loop(times, [0]) == pytest.approx(8 / 7)
    assert parallel_speedup_loop(times, [0, 1]) == pytest.approx(8 / 5)


def test_finite_difference_jacobian_of_a_linear_field():
    """F(u) = P_u V u with V = diag(λ): at u = e1 the tangent Jacobian is diag(λ_2..) − λ_1 I."""
    lam = torch.tensor([2.0, -1.0, 0.5], dtype=torch.float64)

    def field(x):
        vx = x * lam
        return vx - (vx * x).sum(-1, keepdim=True) * x

    u = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
    basis = torch.eye(3, dtype=torch.float64)[:, 1:]
    J = finite_difference_tangent_jacobian(field, u, basis)
    assert torch.allclose(J, torch.diag(lam[1:] - lam[0]), atol=1e-8)
