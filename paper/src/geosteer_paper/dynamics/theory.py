"""Numerical checks of the FFN-steering theory (paper Thm 3, Eq. (9), Eq. (11)).

**First-order branch (Thm 3).** At α = 0 a zero u₀ of g₀ = P_u V u is a unit real eigenvector of V. For small α
the zero moves along u_α = u₀ − α J₀⁻¹ P_{u₀} Φ(u₀) + O(α²), J₀ the tangent Jacobian of g₀ at u₀. The
prediction is written in the chart u = unit(u₀ + B₀ v) (B₀ a basis of u₀⊥); the tracked branch comes from
warm-started Riemannian Newton (:func:`geosteer_paper.dynamics.continuation.continue_alpha`). The angle between the
two should fall like α² (log-log slope ≈ 2).

**Spectral split (Eq. (9)).** J⋆ = J_A(u⋆) + α J_Φ(u⋆), J_A the tangent Jacobian of the attention-only field
and J_Φ = Bᵀ DΦ B − ⟨u, Φ(u)⟩ I that of the FFN field, compared with a central finite-difference Jacobian of
v ↦ Bᵀ g_α(unit(u⋆ + B v)).

**Invariant-region bound (Eq. (11)).** For a law supported on S₁ ∪ S₂ with masses p, 1 − p and ⟨v, w⟩ ≤ cos θ₀
across the sets, D = 1 − ‖E u‖² ≥ 2p(1−p)(1 − cos θ₀). Along a flow of g_α from a population of directions
the sets are the end basins (forward-invariant by construction); at each time the bound is taken with the
current cross-set separation θ₀(t) and with the initial one θ₀(0).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from geosteer.errors import GeosteerError
from geosteer_paper.dynamics.continuation import cluster_ends, continue_alpha, flow_start, sphere_step
from geosteer_paper.dynamics.fields import ReducedField, tangent_basis, tangent_jacobian


def _angle_deg(a: torch.Tensor, b: torch.Tensor) -> float:
    c = float(a @ b) / float(a.norm() * b.norm())
    return math.degrees(math.acos(max(-1.0, min(1.0, c))))


def first_order_branch(V: torch.Tensor, phi: torch.nn.Module, u0: torch.Tensor, alpha: float) -> torch.Tensor:
    """Thm 3's prediction unit(u₀ + B₀ v), v = −α J₀⁻¹ B₀ᵀ Φ(u₀), for a zero u₀ of g₀ = P_u V u."""
    u0 = (u0 / u0.norm()).double()
    B0 = tangent_basis(u0)
    J0 = tangent_jacobian(ReducedField("ov", V=V), u0, B0)
    v = -alpha * torch.linalg.solve(J0, B0.T @ phi(u0[None])[0])
    x = u0 + B0 @ v
    return x / x.norm()


def branch_errors(V: torch.Tensor, phi: torch.nn.Module, u0: torch.Tensor, alphas: Sequence[float],
                  refine_iters: int = 6) -> list[dict]:
    """Per α (increasing, > 0): angle of the tracked zero from u₀ and from the first-order prediction."""
    if not alphas or min(alphas) <= 0 or list(alphas) != sorted(alphas):
        raise GeosteerError(f"alphas must be increasing and > 0 (got {list(alphas)})")
    rows = continue_alpha(V, phi, u0[None], alphas=[0.0, *alphas], refine_iters=refine_iters)
    out = []
    for r in rows[1:]:
        u = torch.tensor(r["u"], dtype=torch.float64)
        pred = first_order_branch(V, phi, u0, r["alpha"])
        out.append({"alpha": r["alpha"], "score": r["score"], "converged": r["converged"],
                    "moved_deg": _angle_deg(u, u0.double()), "error_deg": _angle_deg(u, pred)})
    return out


def loglog_slope(x: Sequence[float], y: Sequence[float]) -> float:
    """Least-squares slope of log y against log x (points with y <= 0 left out)."""
    pts = [(math.log(a), math.log(b)) for a, b in zip(x, y, strict=True) if a > 0 and b > 0]
    if len(pts) < 2:
        return float("nan")
    lx, ly = np.array(pts).T
    return float(np.polyfit(lx, ly, 1)[0])


def fd_tangent_jacobian(field: ReducedField, u: torch.Tensor, h: float = 1e-5) -> torch.Tensor:
    """Central finite-difference Jacobian of v ↦ Bᵀ g(unit(u + B v)) at v = 0 (one batched field call)."""
    B = tangent_basis(u)
    k = B.shape[1]
    x = torch.cat([u[None] + h * B.T, u[None] - h * B.T])
    g = field(x / x.norm(dim=-1, keepdim=True)) @ B
    return ((g[:k] - g[k:]) / (2 * h)).T


def split_jacobian_check(V: torch.Tensor, phi: torch.nn.Module, u: torch.Tensor, alpha: float,
                         h: float = 1e-5) -> dict:
    """J_A + α J_Φ against the finite-difference Jacobian of g_α at u, with the spectral shift of Eq. (9)."""
    u = (u / u.norm()).double()
    B = tangent_basis(u)
    JA = tangent_jacobian(ReducedField("ov", V=V), u, B)
    JP = tangent_jacobian(ReducedField("ffn", phi=phi), u, B)
    Jfd = fd_tangent_jacobian(ReducedField("full", V=V, phi=phi, alpha=alpha), u, h)
    Js = JA + alpha * JP
    ea, es = torch.linalg.eigvals(JA), torch.linalg.eigvals(Js)
    return {"alpha": alpha, "rel_error": float((Js - Jfd).norm() / Jfd.norm()),
            "max_real_JA": float(ea.real.max()), "max_real_Jstar": float(es.real.max()),
            "n_pos_JA": int((ea.real > 0).sum()), "n_pos_Jstar": int((es.real > 0).sum())}


@torch.no_grad()
def flow_path(field: ReducedField, u: torch.Tensor, steps: int, dt: float, every: int = 1) -> list[torch.Tensor]:
    """States of du/dt = g(u) (RK4, renormalised) from u (n, d), every ``every`` steps of size
    dt/median‖F(u₀)‖ (the time unit of the basin study); the first entry is u itself."""
    if steps < 1 or every < 1 or not (math.isfinite(dt) and dt > 0):
        raise GeosteerError(f"flow needs steps >= 1, every >= 1 and dt > 0 (got {steps}, {every}, {dt})")
    u, h = flow_start(field, u, dt)
    path = [u]
    for k in range(1, steps + 1):
        u = sphere_step(field, u, h)
        if k % every == 0 or k == steps:
            path.append(u)
    return path


def region_bound(u: torch.Tensor, in_s1: torch.Tensor) -> dict:
    """D = 1 − ‖mean u‖², p = mass of S₁, cos θ₀ = max cross-set ⟨v, w⟩ and the bound 2p(1−p)(1 − cos θ₀)."""
    if in_s1.all() or not in_s1.any():
        raise GeosteerError("the invariant-region bound needs two non-empty sets")
    p = float(in_s1.double().mean())
    cos0 = float((u[in_s1] @ u[~in_s1].T).max().clamp(-1.0, 1.0))
    D = float(1.0 - u.mean(0).norm() ** 2)
    return {"p": p, "cos_theta0": cos0, "D": D, "bound": 2 * p * (1 - p) * (1 - cos0)}


def region_bound_along_flow(field: ReducedField, u: torch.Tensor, steps: int = 200, dt: float = 0.1,
                            every: int = 20, cluster_deg: float = 5.0,
                            in_s1: torch.Tensor | None = None) -> list[dict]:
    """Eq. (11) at each recorded time of the flow from u: S₁ = the largest end basin (or ``in_s1``), S₂ the
    rest; ``bound`` uses θ₀(t), ``bound_t0`` the initial separation θ₀(0) with the fixed masses."""
    path = flow_path(field, u, steps, dt, every)
    if in_s1 is None:
        labels, _ = cluster_ends(path[-1], cluster_deg)
        in_s1 = torch.from_numpy(labels == 0)
    first = region_bound(path[0], in_s1)
    rows = []
    for k, x in enumerate(path):
        r = region_bound(x, in_s1)
        b0 = 2 * r["p"] * (1 - r["p"]) * (1 - first["cos_theta0"])
        rows.append({"record": k, **r, "bound_t0": b0, "margin": r["D"] - r["bound"], "margin_t0": r["D"] - b0})
    return rows
