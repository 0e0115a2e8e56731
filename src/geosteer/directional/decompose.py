"""Parallel / perpendicular decomposition (paper Eqs. 1-2, 4-6, 8-11) and running per-token summaries.

Everything here is plain tensor math on the last dimension; no model code. ``Δ`` (``delta``) is an update,
``z`` its reference (the incoming residual state, or the token's own value vector).
"""

from __future__ import annotations

import math

import torch

# Per-token statistics of one (Δ, z) pair, in this order (names say what each statistic is):
#   alpha      α = Δ·z / ‖z‖²                       (Eq. 1 / 4)
#   par_norm   ‖Δ∥‖ = |α|·‖z‖                        (Eq. 1)
#   perp_norm  ‖Δ⊥‖ = ‖Δ − αz‖                        (Eq. 2)
#   ratio      r = |α|·‖z‖ / ‖Δ⊥‖                     (Eq. 6; the ‖Δ∥‖/‖Δ⊥‖ of Figure 1)
#   abs_cos    |cos(Δ, z)| = ‖Δ∥‖ / ‖Δ‖              (the paper's |cos|, not cos²)
#   rel_norm   ‖Δ‖ / ‖z‖                              (Figure 11)
PAIR_STATS = ("alpha", "par_norm", "perp_norm", "ratio", "abs_cos", "rel_norm")
_TINY = 1e-30


def decompose(delta: torch.Tensor, z: torch.Tensor, eps: float = _TINY) -> tuple[torch.Tensor, ...]:
    """Eq. 1-2: ``(alpha, delta_par, delta_perp)`` with ``alpha`` shaped like ``delta[..., :1]``.

    A zero reference gives α = 0 (the whole update is perpendicular by convention).
    """
    zz = (z * z).sum(-1, keepdim=True)
    alpha = (delta * z).sum(-1, keepdim=True) / zz.clamp_min(eps)
    alpha = torch.where(zz > eps, alpha, torch.zeros_like(alpha))
    par = alpha * z
    return alpha, par, delta - par


def component_scale(y: torch.Tensor, ref: torch.Tensor, s_par: float, s_perp: float) -> torch.Tensor:
    """Eq. 11: ỹ = s∥·y∥ + s⊥·y⊥, written as y + (s∥−1)·y∥ + (s⊥−1)·y⊥ (s∥ = s⊥ = 1 returns y exactly)."""
    if s_par == 1.0 and s_perp == 1.0:
        return y + 0.0 * y  # same values as y (finite inputs), but a new tensor like the general case
    _, par, perp = decompose(y, ref)
    out = y
    if s_par != 1.0:
        out = out + (s_par - 1.0) * par
    if s_perp != 1.0:
        out = out + (s_perp - 1.0) * perp
    return out


def pair_stats(delta: torch.Tensor, z: torch.Tensor, scale: torch.Tensor | None = None,
               zero_tol: float = 1e-6) -> dict[str, torch.Tensor]:
    """Per-token statistics (``PAIR_STATS``) of ``delta`` against ``z``, each shaped ``delta.shape[:-1]``; the
    ratio is NaN where ‖Δ⊥‖ ≤ ``zero_tol``·max(‖Δ‖, scale) and |cos| where ‖Δ‖ ≤ ``zero_tol``·scale.
    """
    delta = delta.float()
    z = z.float()
    alpha, _, perp = decompose(delta, z)
    alpha = alpha.squeeze(-1)
    z_norm = z.norm(dim=-1)
    d_norm = delta.norm(dim=-1)
    par_norm = alpha.abs() * z_norm
    perp_norm = perp.norm(dim=-1)
    ref = d_norm if scale is None else torch.maximum(d_norm, scale)
    nan = torch.full_like(d_norm, float("nan"))
    d_floor = zero_tol * scale if scale is not None else torch.zeros_like(d_norm)
    return {
        "alpha": alpha,
        "par_norm": par_norm,
        "perp_norm": perp_norm,
        "ratio": torch.where(perp_norm > zero_tol * ref, par_norm / perp_norm.clamp_min(_TINY), nan),
        "abs_cos": torch.where(d_norm > d_floor, par_norm / d_norm.clamp_min(_TINY), nan),
        "rel_norm": d_norm / z_norm.clamp_min(_TINY),
    }


class RunningStats:
    """Per-column count, sum, sum of squares, min and max of per-token values, without keeping the tokens.

    ``update(values, mask)``: the leading ``mask.dim()`` axes of ``values`` are token axes (tokens where
    ``mask`` is False are skipped); the trailing axes (e.g. heads × statistics) stay separate. Non-finite
    values (undefined statistics) are skipped per column and not counted. Memory is O(trailing axes).
    """

    __slots__ = ("n", "count", "s1", "s2", "lo", "hi")

    def __init__(self) -> None:
        self.n = 0
        self.count = self.s1 = self.s2 = self.lo = self.hi = None

    def update(self, values: torch.Tensor, mask: torch.Tensor) -> None:
        """Add the tokens of ``values`` (token axes first, shaped like ``mask``) where ``mask`` is True."""
        v = values.detach().double()
        k = mask.dim()
        flat = v.reshape(-1, *v.shape[k:])[mask.reshape(-1)]
        if flat.shape[0] == 0:
            return
        ok = torch.isfinite(flat)
        z = torch.where(ok, flat, torch.zeros((), dtype=flat.dtype))
        inf = torch.tensor(math.inf, dtype=flat.dtype)
        parts = (ok.sum(0), z.sum(0), (z * z).sum(0), torch.where(ok, flat, inf).amin(0),
                 torch.where(ok, flat, -inf).amax(0))
        if self.s1 is None:
            self.count, self.s1, self.s2, self.lo, self.hi = parts
        else:
            self.count = self.count + parts[0]
            self.s1 = self.s1 + parts[1]
            self.s2 = self.s2 + parts[2]
            self.lo = torch.minimum(self.lo, parts[3])
            self.hi = torch.maximum(self.hi, parts[4])
        self.n += int(flat.shape[0])

    def summary(self) -> dict[str, torch.Tensor | int]:
        """``{"n" (tokens), "count" (finite values per column), "mean", "std" (population), "min", "max"}``;
        NaN where a column had no finite value."""
        if self.s1 is None:
            nan = torch.tensor(math.nan, dtype=torch.float64)
            return {"n": 0, "count": torch.tensor(0), "mean": nan, "std": nan, "min": nan, "max": nan}
        c = self.count.double()
        has = c > 0
        nan = torch.tensor(math.nan, dtype=torch.float64)
        mean = torch.where(has, self.s1 / c.clamp_min(1), nan)
        var = (self.s2 / c.clamp_min(1) - mean * mean).clamp_min(0.0)
        return {"n": self.n, "count": self.count, "mean": mean, "std": var.sqrt(),
                "min": torch.where(has, self.lo, nan), "max": torch.where(has, self.hi, nan)}
