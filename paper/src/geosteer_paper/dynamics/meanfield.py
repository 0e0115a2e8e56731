"""Paper 2's Thm 2 (mean-field limit of full attention) as a numerical check on a real layer.

The particle system is Eq. (1) with *bidirectional* attention (every token attends to every token, the
setting of the theorem): for unit directions u_1 … u_L,

    du_i/dt = P_{u_i} [ Σ_h W_O,h Σ_j softmax_j(⟨W_Q,h u_i, W_K,h u_j⟩ / √d_h) W_V,h u_j + α Φ(u_i) ],

with a layer's real projections (the attention pre-norm folded in as its gain on the unit sphere, as in
:func:`geosteer_paper.dynamics.fields.effective_ov`; no rotary embedding, which would tie the field to positions and
break the exchangeability the theorem needs) and, for α ≠ 0, the layer's real FFN branch Φ.

For a measure μ the velocity is b[μ](u) = P_u[Σ_h W_O,h N_h[μ](u) / D_h[μ](u) + α Φ(u)] with
N_h = ∫ W_V,h v κ_h(u, v) dμ(v), D_h = ∫ κ_h(u, v) dμ(v). A discrete measure Σ_m w_m δ_{x_m} is moved by
moving its atoms with b[μ_t] and keeping the weights, so the mean-field solution from a discrete μ_0 is exact
(no large-L reference is needed), and the L-particle system is the same flow with the weights n_m / L of
the atoms its particles were drawn from (the 1/L factors cancel; a test checks this against L explicit
particles). Thm 2 then says W₁(μ_t^L, μ_t) ≤ e^{Ct} W₁(μ_0^L, μ_0): the error at time t falls with L at the
rate of the initial sampling error, L^{-1/2} for i.i.d. draws from a discrete law.

W₁ is the exact optimal-transport cost between two discrete measures (chordal distance ‖x − y‖), solved as a
linear programme (``scipy.optimize.linprog``, HiGHS).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from geosteer.dynamics.ov import sphere_gain
from geosteer.errors import GeosteerError
from geosteer.models.anatomy import anatomy
from geosteer_paper.dynamics.fields import _FFNBranch


@dataclass
class AttentionLaw:
    """One layer's bidirectional attention (and optional FFN) acting on unit directions, float64.

    ``wq``, ``wk``, ``wv``: (H, d_h, d) per query head (GQA kv heads repeated), acting on u with the
    pre-norm gain folded in; ``wo``: (H, d, d_h); ``phi``: the FFN branch or None; ``alpha``: its gain."""

    wq: torch.Tensor
    wk: torch.Tensor
    wv: torch.Tensor
    wo: torch.Tensor
    phi: nn.Module | None = None
    alpha: float = 0.0

    @property
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.wq.shape[1])

    def ambient(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """The unprojected velocity at the atoms x (M, d) of the measure Σ_m w_m δ_{x_m} (w > 0, Σ w = 1)."""
        q = torch.einsum("hed,md->hme", self.wq, x)
        k = torch.einsum("hed,md->hme", self.wk, x)
        v = torch.einsum("hed,md->hme", self.wv, x)
        logits = q @ k.transpose(1, 2) * self.scale + torch.log(w)[None, None, :]  # κ weighted by w_j
        out = torch.einsum("hde,hme->md", self.wo, logits.softmax(-1) @ v)
        if self.alpha != 0.0 and self.phi is not None:
            out = out + self.alpha * self.phi(x)
        return out

    def velocity(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """b[μ](x_m) = P_{x_m} F: the tangential part of :meth:`ambient`."""
        f = self.ambient(x, w)
        return f - (f * x).sum(-1, keepdim=True) * x


def _proj(attn: nn.Module, name: str) -> nn.Linear:
    mod = getattr(attn, name, None)
    if not isinstance(mod, nn.Linear):
        raise GeosteerError(f"the mean-field check reads separate q_proj/k_proj/v_proj/o_proj Linear modules; "
                            f"{type(attn).__name__} has no '{name}' (families: llama, mistral, qwen2)")
    return mod


@torch.no_grad()
def layer_law(model: nn.Module, layer: int, alpha: float = 0.0) -> AttentionLaw:
    """The bidirectional attention law of ``layer`` (float64 copies; the model is not touched). Models whose
    attention normalises q or k per head (Qwen3, Gemma-3) are refused: that map is not linear in u."""

    if not math.isfinite(alpha):
        raise GeosteerError(f"alpha must be finite (got {alpha})")
    an = anatomy(model)
    an.check_layers([layer])
    attn = an.blocks[layer].attn
    if getattr(attn, "q_norm", None) is not None or getattr(attn, "k_norm", None) is not None:
        raise GeosteerError(f"{type(attn).__name__} normalises q/k per head; the mean-field check needs linear "
                            "q/k maps (families: llama, mistral, qwen2)")
    gain = sphere_gain(model, layer)
    h, dh, rep = an.n_heads, an.head_dim, an.n_rep
    kv = torch.arange(h) // rep

    def heads(name: str, n: int) -> torch.Tensor:
        lin = _proj(attn, name)
        if lin.bias is not None and bool(lin.bias.abs().max() > 0):
            raise GeosteerError(f"{name} has a bias; the mean-field check takes bias-free projections")
        return (lin.weight.detach().double().cpu() * gain[None, :]).view(n, dh, an.d_model)

    wq = heads("q_proj", h)
    wk, wv = heads("k_proj", an.n_kv_heads)[kv], heads("v_proj", an.n_kv_heads)[kv]
    wo = _proj(attn, "o_proj").weight.detach().double().cpu().view(an.d_model, h, dh).permute(1, 0, 2)
    phi = _FFNBranch(an.blocks[layer]).cpu() if alpha != 0.0 else None
    return AttentionLaw(wq.contiguous(), wk.contiguous(), wv.contiguous(), wo.contiguous(), phi, float(alpha))


def _rk4(law: AttentionLaw, x: torch.Tensor, w: torch.Tensor, h: float) -> torch.Tensor:
    k1 = law.velocity(x, w)
    k2 = law.velocity(x + 0.5 * h * k1, w)
    k3 = law.velocity(x + 0.5 * h * k2, w)
    k4 = law.velocity(x + h * k3, w)
    y = x + h / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
    return y / y.norm(dim=-1, keepdim=True)


@torch.no_grad()
def flow_measure(law: AttentionLaw, x: torch.Tensor, w: torch.Tensor, steps: int, h: float) -> torch.Tensor:
    """The atoms of μ_t after ``steps`` RK4 steps of size h (renormalised onto the sphere); weights fixed."""
    if steps < 0 or not (math.isfinite(h) and h > 0):
        raise GeosteerError(f"the flow needs steps >= 0 and a step h > 0 (got {steps}, {h})")
    x = x.double() / x.double().norm(dim=-1, keepdim=True)
    w = w.double()
    for _ in range(steps):
        x = _rk4(law, x, w, h)
    return x


def w1(x: np.ndarray, a: np.ndarray, y: np.ndarray, b: np.ndarray) -> float:
    """Exact W₁ between Σ a_i δ_{x_i} and Σ b_j δ_{y_j} (weights each summing to one; Euclidean cost)."""
    from scipy.optimize import linprog

    x, y, a, b = (np.asarray(v, dtype=np.float64) for v in (x, y, a, b))
    if not (math.isclose(a.sum(), 1.0, abs_tol=1e-9) and math.isclose(b.sum(), 1.0, abs_tol=1e-9)):
        raise GeosteerError("W1 needs two probability vectors (weights summing to one)")
    cost = np.sqrt(np.maximum(((x[:, None, :] - y[None, :, :]) ** 2).sum(-1), 0.0))
    n, m = cost.shape
    rows = np.kron(np.eye(n), np.ones((1, m)))  # Σ_j π_ij = a_i
    cols = np.kron(np.ones((1, n)), np.eye(m))  # Σ_i π_ij = b_j
    res = linprog(cost.ravel(), A_eq=np.vstack([rows, cols]), b_eq=np.concatenate([a, b]), bounds=(0, None),
                  method="highs")
    if res.status != 0:
        raise GeosteerError(f"the transport problem did not solve ({res.message})")
    return float(res.fun)


def sampled_weights(m: int, n_particles: int, rng: np.random.Generator) -> np.ndarray:
    """n_m / L for L particles drawn i.i.d. from the uniform law on m atoms."""
    return rng.multinomial(n_particles, np.full(m, 1.0 / m)) / n_particles


def mean_field_rows(law: AttentionLaw, atoms: torch.Tensor, sizes: Sequence[int], repeats: int, steps: int,
                    dt: float, seed: int = 0, every: int | None = None) -> list[dict]:
    """Per particle count L, draw r and recorded time t: W₁(μ_0^L, μ_0) and W₁(μ_t^L, μ_t), μ_0 uniform on
    ``atoms`` (M, d), t = k · ``every`` steps (default: only the end, ``steps``) of h = dt / median ‖F(x_m)‖
    under μ_0 (one step for every run; ``time`` in units of dt); draws by ``numpy.random.default_rng(seed)``."""
    every = steps if every is None else every
    if min(sizes, default=0) < 1 or repeats < 1 or steps < 1 or every < 1 or steps % every:
        raise GeosteerError("particle counts, --repeats, --steps and --every must be >= 1, --every dividing --steps")
    x0 = atoms.double() / atoms.double().norm(dim=-1, keepdim=True)
    m = x0.shape[0]
    w = torch.full((m,), 1.0 / m, dtype=torch.float64)
    h = dt / float(law.ambient(x0, w).norm(dim=-1).median().clamp_min(1e-300))
    refs, x = [], x0
    for _ in range(steps // every):
        x = flow_measure(law, x, w, every, h)
        refs.append(x)
    rng = np.random.default_rng(seed)
    rows = []
    for n_particles in sizes:
        for r in range(repeats):
            wl = sampled_weights(m, n_particles, rng)
            keep = torch.from_numpy(np.flatnonzero(wl))
            wk = torch.from_numpy(wl[keep.numpy()])
            d0 = w1(x0[keep].numpy(), wk.numpy(), x0.numpy(), w.numpy())
            xt = x0[keep]
            for k, ref in enumerate(refs, start=1):
                xt = flow_measure(law, xt, wk, every, h)
                d = w1(xt.numpy(), wk.numpy(), ref.numpy(), w.numpy())
                moved = torch.rad2deg(torch.arccos((ref * x0).sum(-1).clamp(-1, 1)))
                rows.append({"particles": int(n_particles), "draw": r, "atoms_hit": int(keep.numel()),
                             "time": k * every * dt, "w1_0": d0, "w1_t": d, "ratio": d / d0 if d0 > 0 else
                             float("nan"), "median_move_deg": float(moved.median())})
    return rows


def loglog_fit(rows: list[dict], field: str, sizes: Sequence[int] | None = None) -> float:
    """The least-squares slope of log mean(``field``) over draws against log L (over ``sizes``, default all)."""
    sizes = sorted({r["particles"] for r in rows}) if sizes is None else sorted(sizes)
    means = [np.mean([r[field] for r in rows if r["particles"] == n]) for n in sizes]
    return float(np.polyfit(np.log(sizes), np.log(means), 1)[0])
