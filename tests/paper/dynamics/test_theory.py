"""Theory checks of the FFN steering field on synthetic fields with known closed forms (Thm 3, Eq. (9),
Eq. (11)); references are scipy root finding, an analytic ODE solution and hand-built Jacobians."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.optimize import brentq

from geosteer.errors import GeosteerError
from geosteer_paper.dynamics.fields import ReducedField, tangent_basis
from geosteer_paper.dynamics.theory import (
    branch_errors,
    first_order_branch,
    flow_path,
    loglog_slope,
    region_bound,
    region_bound_along_flow,
    split_jacobian_check,
)


class Const(torch.nn.Module):
    """Φ(u) = c, a constant ambient field."""

    def __init__(self, c):
        super().__init__()
        self.c = torch.as_tensor(c, dtype=torch.float64)

    def forward(self, u):
        return self.c.expand(u.shape)


class TanhMLP(torch.nn.Module):
    """Φ(u) = W₂ tanh(W₁ u)."""

    def __init__(self, d, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.w1 = torch.randn(d, d, generator=g, dtype=torch.float64)
        self.w2 = torch.randn(d, d, generator=g, dtype=torch.float64) / math.sqrt(d)

    def forward(self, u):
        return torch.tanh(u @ self.w1.T) @ self.w2.T


def _circle_g(t, a, b, c, al):
    return (b - a) * math.sin(t) * math.cos(t) + al * (-c[0] * math.sin(t) + c[1] * math.cos(t))


def test_circle_branch_matches_scipy_root_and_first_order_slope():
    # d = 2, V = diag(a, b), Φ = c: zeros of g_α solve (b − a) sin t cos t + α(−c₁ sin t + c₂ cos t) = 0
    a, b, c = 1.0, -0.5, (0.3, 0.8)
    V = torch.diag(torch.tensor([a, b], dtype=torch.float64))
    phi = Const(c)
    alphas = [0.01 * 2 ** k for k in range(6)]
    rows = branch_errors(V, phi, torch.tensor([1.0, 0.0], dtype=torch.float64), alphas)
    for r in rows:
        t = brentq(_circle_g, -0.7, 0.7, args=(a, b, c, r["alpha"]))
        assert r["converged"]
        assert r["moved_deg"] == pytest.approx(abs(math.degrees(t)), abs=1e-6)
        # first order in the chart u₀ + B₀ v: tan t = v = −α c₂ / (b − a)
        pred = first_order_branch(V, phi, torch.tensor([1.0, 0.0], dtype=torch.float64), r["alpha"])
        assert float(pred[1] / pred[0]) == pytest.approx(-r["alpha"] * c[1] / (b - a), rel=1e-9)
    slope = loglog_slope([r["alpha"] for r in rows], [r["error_deg"] for r in rows])
    assert 1.8 < slope < 2.2


def test_first_order_error_is_quadratic_for_a_nonlinear_field():
    d = 6
    g = torch.Generator().manual_seed(1)
    Q, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
    V = Q @ torch.diag(torch.tensor([2.0, 0.5, 0.1, -0.3, -1.0, -1.5], dtype=torch.float64)) @ Q.T
    rows = branch_errors(V, TanhMLP(d), Q[:, 0], [0.002 * 2 ** k for k in range(5)])
    assert all(r["converged"] for r in rows)
    errs = [r["error_deg"] for r in rows]
    assert errs[-1] < 0.1 * rows[-1]["moved_deg"]  # the prediction explains the move
    assert 1.8 < loglog_slope([r["alpha"] for r in rows], errs) < 2.2


def test_split_jacobian_against_hand_built_jacobian():
    # Φ(u) = W u is linear: J_Φ = Bᵀ W B − ⟨u, W u⟩ I, J_A likewise with V; the sum is the field's Jacobian
    d = 5
    g = torch.Generator().manual_seed(2)
    V, W = (torch.randn(d, d, generator=g, dtype=torch.float64) for _ in range(2))

    class Lin(torch.nn.Module):
        def forward(self, u):
            return u @ W.T

    u = torch.randn(d, generator=g, dtype=torch.float64)
    u = u / u.norm()
    alpha = 0.7
    rec = split_jacobian_check(V, Lin(), u, alpha)
    assert rec["rel_error"] < 1e-8
    B = tangent_basis(u)
    M = V + alpha * W
    J = B.T @ M @ B - float(u @ M @ u) * torch.eye(d - 1, dtype=torch.float64)
    assert rec["max_real_Jstar"] == pytest.approx(float(torch.linalg.eigvals(J).real.max()), abs=1e-10)


def test_split_jacobian_nonlinear_field_fd_agreement_and_alpha_sensitivity():
    d = 6
    g = torch.Generator().manual_seed(3)
    V = torch.randn(d, d, generator=g, dtype=torch.float64)
    u = torch.randn(d, generator=g, dtype=torch.float64)
    rec = split_jacobian_check(V, TanhMLP(d, 4), u, 1.3)
    assert rec["rel_error"] < 1e-7
    only_a = split_jacobian_check(V, TanhMLP(d, 4), u, 0.0)
    assert only_a["rel_error"] < 1e-7  # α = 0: J_A is the whole Jacobian
    assert abs(rec["max_real_Jstar"] - rec["max_real_JA"]) > 1e-3  # the FFN part shifts the spectrum


def test_flow_matches_closed_form_and_cap_bound_holds():
    # V = diag(1, 0, …): u₁' = u₁(1 − u₁²), so u₁(t)² = 1 / (1 + (1/u₁(0)² − 1) e^{−2t}); the caps
    # {u₁ >= c}, {u₁ <= −c} are forward-invariant with cos θ₀ = 1 − 2c²
    d, n, c = 4, 40, 0.3
    V = torch.zeros(d, d, dtype=torch.float64)
    V[0, 0] = 1.0
    rng = np.random.default_rng(0)
    rest = rng.standard_normal((n, d - 1))
    u1 = np.where(np.arange(n) < 12, 1.0, -1.0) * rng.uniform(c, 0.95, n)
    rest *= np.sqrt(1 - u1 ** 2)[:, None] / np.linalg.norm(rest, axis=1, keepdims=True)
    u = torch.from_numpy(np.column_stack([u1, rest]))
    field = ReducedField("ov", V=V)
    steps, dt = 200, 0.05
    path = flow_path(field, u, steps, dt, every=50)
    h = dt / float(field.ambient(u).norm(dim=-1).median())
    t = steps * h
    u10 = u[:, 0].numpy()
    exact = np.sign(u10) / np.sqrt(1 + (1 / u10 ** 2 - 1) * np.exp(-2 * t))
    np.testing.assert_allclose(path[-1][:, 0].numpy(), exact, atol=1e-6)
    in_s1 = u[:, 0] > 0
    for x in path:
        assert (x[in_s1, 0] >= c - 1e-12).all() and (x[~in_s1, 0] <= -c + 1e-12).all()
        r = region_bound(x, in_s1)
        p = 12 / n
        assert r["p"] == pytest.approx(p)
        assert r["cos_theta0"] <= 1 - 2 * c * c + 1e-12
        assert r["D"] >= 2 * p * (1 - p) * 2 * c * c
    rows = region_bound_along_flow(field, u, steps, dt, every=50, in_s1=in_s1)
    assert all(r["margin"] >= 0 and r["margin_t0"] >= 0 for r in rows)


def test_region_bound_is_tight_on_two_points_and_refuses_one_set():
    v = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    r = region_bound(v, torch.tensor([True, False]))
    assert r["D"] == pytest.approx(0.5) and r["bound"] == pytest.approx(0.5)  # 2·½·½·(1 − 0)
    with pytest.raises(GeosteerError):
        region_bound(v, torch.tensor([True, True]))
    with pytest.raises(GeosteerError):
        branch_errors(torch.eye(2, dtype=torch.float64), Const((0.0, 1.0)), v[0], [0.2, 0.1])


@pytest.mark.parametrize("argv, message", [
    (["--alphas", "0.1,0.05"], "--alphas"),
    (["--alphas", "0,0.1"], "--alphas"),
    (["--residuals", "1"], "--residuals"),
])
def test_theory_study_bad_input_exits_2_before_loading(argv, message, monkeypatch, capsys):
    from tests.cli_helpers import run_argv as run

    code, _, err = run(["study", "dynamics", "theory", "-m", "tiny-llama", "--layers", "0", *argv], monkeypatch, capsys)
    assert code == 2 and err.strip().startswith("error:") and message in err and "Traceback" not in err
