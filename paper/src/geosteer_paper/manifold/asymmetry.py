"""Asymmetry of the learned surfaces, S_d(q, k) ≠ S_d(k, q) (the paper's §6).

With the same basis on both axes, S(k, q) = b(q)ᵀ Cᵀ b(k), so a surface is symmetric exactly when its control
net is. Two measures per surface, each the share of the antisymmetric part, ‖X − Xᵀ‖_F / (2‖X‖_F): 0 for a
symmetric surface, 1 for an antisymmetric one:

- ``coef``: X = C, the control net;
- ``sampled``: X = S sampled on an n × n grid of [lo, hi]² (what the surface does where the grid is).

For reference, a control net of independent Gaussian entries scores about √((K − 1)/(2K)) on ``coef``
(0.67 for K = 11).
"""

from __future__ import annotations

import torch

from geosteer.kernels.bspline import bspline_basis


def _ratio(x: torch.Tensor) -> torch.Tensor:
    """‖X − Xᵀ‖_F / (2 ‖X‖_F) over the last two dims (0 where X = 0)."""
    num = (x - x.transpose(-1, -2)).flatten(-2).norm(dim=-1)
    den = x.flatten(-2).norm(dim=-1) * 2.0
    return torch.where(den > 0, num / den.clamp_min(1e-30), torch.zeros_like(num))


def surface_asymmetry(bank, samples: int = 33) -> dict[str, torch.Tensor]:
    """Per-surface measures, each (layers, heads, head_dim): ``coef``, ``sampled``, and ``norm`` (‖C‖_F)."""
    c = bank.coefficients.detach().to("cpu", torch.float64)
    sampled = torch.empty(c.shape[:3], dtype=torch.float64)
    for i in range(c.shape[0]):
        lo, hi = float(bank.lo[i]), float(bank.hi[i])
        b = bspline_basis(torch.linspace(lo, hi, samples, dtype=torch.float64), bank.grid_size, lo, hi)
        s = b @ c[i] @ b.T  # (heads, head_dim, n, n): S(q_u, k_v)
        sampled[i] = _ratio(s)
    return {"coef": _ratio(c), "sampled": sampled, "norm": c.flatten(-2).norm(dim=-1)}


def asymmetry_by_layer(bank, samples: int = 33) -> list[dict]:
    """One row per layer: mean and norm-weighted mean of each measure, and its largest-norm surface's values."""
    m = surface_asymmetry(bank, samples)
    rows = []
    for i, layer in enumerate(bank.layers):
        w = m["norm"][i].flatten()
        row = {"layer": int(layer), "surfaces": int(w.numel()), "layer_norm": float(w.pow(2).sum().sqrt())}
        for name in ("coef", "sampled"):
            v = m[name][i].flatten()
            row[f"{name}_mean"] = float(v.mean())
            row[f"{name}_weighted"] = float((v * w).sum() / w.sum()) if float(w.sum()) > 0 else 0.0
        top = int(w.argmax())
        row.update({"top_head": top // bank.head_dim, "top_dim": top % bank.head_dim,
                    "top_norm": float(w[top]), "top_coef": float(m["coef"][i].flatten()[top]),
                    "top_sampled": float(m["sampled"][i].flatten()[top])})
        rows.append(row)
    return rows
