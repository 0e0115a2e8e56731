"""Uniform cubic B-spline bases on a grid (the attention-manifold paper's conventions).

g intervals over [lo, hi]: h = (hi − lo)/g, knots t_i = lo + (i − 3)·h (i = 0 … g+6), K = g + 3 bases; B_a is
supported on [t_a, t_{a+4}). :func:`bspline_basis` is dense (``x.shape + (K,)``); :func:`bspline_local` gives
the first active index ``a0`` and the 4 weights (1−t)³/6, (3t³−6t²+4)/6, (−3t³+3t²+3t+1)/6, t³/6.
``lo``/``hi`` may be tensors broadcastable to ``x``.
"""

from __future__ import annotations

import torch


def n_basis(grid_size: int) -> int:
    """K = grid_size + 3."""
    return int(grid_size) + 3


def check_grid(grid_size: int, lo, hi) -> None:
    """Refuse a grid size < 1 or lo ≥ hi (message names the valid range)."""
    if int(grid_size) != grid_size or grid_size < 1:
        raise ValueError(f"grid size must be an integer ≥ 1 (got {grid_size})")
    lo_t, hi_t = torch.as_tensor(lo, dtype=torch.float64), torch.as_tensor(hi, dtype=torch.float64)
    if not bool(torch.all(torch.isfinite(lo_t))) or not bool(torch.all(torch.isfinite(hi_t))):
        raise ValueError("grid range must be finite")
    if bool(torch.any(lo_t >= hi_t)):
        raise ValueError(f"grid range needs lo < hi (got lo={lo_t.tolist()}, hi={hi_t.tolist()})")


def knots(grid_size: int, lo: float, hi: float) -> torch.Tensor:
    """The g + 7 knots t_i = lo + (i - 3)·h (float64)."""
    h = (hi - lo) / grid_size
    return lo + (torch.arange(grid_size + 7, dtype=torch.float64) - 3) * h


def _as_like(v, x: torch.Tensor):
    return v.to(device=x.device, dtype=x.dtype) if torch.is_tensor(v) else v


def bspline_local(x: torch.Tensor, grid_size: int, lo, hi) -> tuple[torch.Tensor, torch.Tensor]:
    """Local form: ``(a0, w)`` with ``a0`` (long, x.shape) and ``w`` (x.shape + (4,)).

    ``B_{a0 + r}(x) = w[..., r]`` for r = 0 … 3 and every other basis is zero. Outside the support all
    four weights are zero (and ``a0`` is clamped so that gathers stay in bounds of a padded table).
    Differentiable in ``x`` (the interval index is piecewise constant).
    """
    g = int(grid_size)
    lo, hi = _as_like(lo, x), _as_like(hi, x)
    u = (x - lo) * (g / (hi - lo)) + 3.0  # position in knot units from t_0
    s = torch.floor(u)
    inside = (u >= 0) & (u < g + 6)
    s = torch.where(inside, s, torch.zeros_like(s))
    t = torch.where(inside, u - s, torch.zeros_like(u))
    t2 = t * t
    t3 = t2 * t
    one_m = 1.0 - t
    w = torch.stack(
        (one_m * one_m * one_m, 3.0 * t3 - 6.0 * t2 + 4.0, -3.0 * t3 + 3.0 * t2 + 3.0 * t + 1.0, t3), dim=-1
    ) * (1.0 / 6.0)
    w = w * inside.unsqueeze(-1).to(w.dtype)
    a0 = s.long() - 3
    return a0, w


def bspline_basis(x: torch.Tensor, grid_size: int, lo, hi) -> torch.Tensor:
    """Dense basis values ``x.shape + (K,)`` with K = grid_size + 3 (see the module docstring)."""
    g = int(grid_size)
    K = g + 3
    a0, w = bspline_local(x, g, lo, hi)
    # Scatter into a table padded by 3 on both sides (a0 ∈ [-3, K-1]), then drop the padding.
    idx = (a0 + 3).unsqueeze(-1) + torch.arange(4, device=x.device)
    out = torch.zeros(*x.shape, K + 6, dtype=w.dtype, device=x.device)
    out = out.scatter(-1, idx, w)
    return out[..., 3 : 3 + K]


def bspline_basis_reference(x, grid_size: int, lo: float, hi: float):
    """Independent float64 evaluation with ``scipy.interpolate.BSpline.basis_element`` (for tests)."""
    import numpy as np
    from scipy.interpolate import BSpline

    t = knots(grid_size, lo, hi).numpy()
    xs = np.asarray(x, dtype=np.float64)
    out = np.zeros(xs.shape + (grid_size + 3,))
    for a in range(grid_size + 3):
        el = BSpline.basis_element(t[a : a + 5], extrapolate=False)
        v = el(xs)
        v = np.nan_to_num(v, nan=0.0)
        # basis_element includes its right end point; our support is half-open [t_a, t_{a+4}).
        v[xs >= t[a + 4]] = 0.0
        out[..., a] = v
    return out
