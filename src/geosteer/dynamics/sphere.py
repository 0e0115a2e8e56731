"""Geometry on the sphere of residual directions (paper §2–4).

A residual state x has radius r = ‖x‖ and direction u = x / r. The tangent projector at u is
P_u = I − u uᵀ (paper Eq. (2)); any update F splits into a radial part ⟨u, F⟩u and a tangential part
P_u F (paper Eq. (19)). All functions act on the last dimension and broadcast over (batch, seq).
"""

from __future__ import annotations

import torch

EPS = 1e-12


def unit(x: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """u = x / ‖x‖ along the last dimension (zero vectors stay zero)."""
    return x / x.norm(dim=-1, keepdim=True).clamp_min(eps)


def radial(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """⟨u, v⟩ u, the radial component of ``v`` at the unit direction ``u`` (Eq. (19))."""
    return (v * u).sum(-1, keepdim=True) * u


def tangential(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """P_u v = v − ⟨u, v⟩ u, the tangential component of ``v`` at the unit direction ``u`` (Eq. (2), (19))."""
    return v - radial(u, v)


def cosine(a: torch.Tensor, b: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """cos(a, b) along the last dimension; 0 where either vector is 0."""
    return (a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1)).clamp_min(eps)


def diversity(u: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Spherical diversity D(μ) = 1 − ‖E u‖² (Eq. (20)) per sequence.

    ``u``: (batch, seq, d) unit directions; ``mask``: (batch, seq) bool, True for real tokens (padding is
    left out of the mean). Returns (batch,).
    """
    if mask is None:
        mean = u.mean(dim=1)
    else:
        m = mask.to(u.dtype).unsqueeze(-1)
        mean = (u * m).sum(1) / m.sum(1).clamp_min(1.0)
    return 1.0 - (mean * mean).sum(-1)


def norm_cv(norms: torch.Tensor) -> torch.Tensor:
    """Coefficient of variation std(‖x‖) / mean(‖x‖) of a 1-D tensor of norms (paper App. C.6)."""
    if norms.numel() < 2:
        return torch.tensor(float("nan"))
    return norms.std() / norms.mean().clamp_min(EPS)
