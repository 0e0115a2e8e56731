"""Reduced fields of one layer on the sphere of residual directions (paper §3, §4 "FFN reshapes the local
critical geometry", App. C.3–C.4) and their tangent linearisation.

For a layer ℓ and a unit direction u (P_u = I − u uᵀ):

- ``ov``   attention-only field g_OV(u) = P_u V u, V the layer's effective OV map in residual space;
- ``ffn``  FFN-only field P_u Φ(u), Φ the checkpoint's real FFN branch (pre-norm → MLP → post-norm if any);
- ``full`` g_α(u) = P_u (V u + α Φ(u)).

The ambient field is F(u) (V u, Φ(u) or V u + α Φ(u)); the field on the sphere is g(u) = P_u F(u).

**Effective V and its norm handling** (``ov_norm``): V = Σ_h W_O,h W_V,g(h) (GQA: query head h reads kv head
g(h) = h // n_rep; read from ``v_proj``/``o_proj`` where the family has them, else by probing with
:func:`geosteer.dynamics.ov.ov_weights`; a test checks both agree) acting on the *normed* input.
With ``ov_norm="gain"`` (default) the pre-attention norm is folded in as the diagonal map it is on the unit
sphere: RMSNorm(u) = γ ⊙ u / sqrt(1/d + ε) for ‖u‖ = 1, so V = Σ_h W_O,h W_V,h · diag(γ / sqrt(1/d + ε)),
exact for RMSNorm families (Gemma-3's (1 + w) gain included: γ is read by applying the module). For LayerNorm
families the gain γ·√d is folded and the centring and bias are dropped (V must be linear). Biases of the
value and output projections are dropped, and so is Gemma-3's post-attention norm. ``ov_norm="none"``: the
raw Σ_h W_O,h W_V,h. Φ, in contrast, is the real module on the state x = u (RMSNorm makes it independent
of the radius), so V u + Φ(u) is the update of a token that attends only to itself.

**Tangent Jacobian.** With an orthonormal basis B (d × (d−1)) of T_u S^{d−1}, the intrinsic linearisation
in tangent coordinates is J = Bᵀ DF(u) B − ⟨u, F(u)⟩ I_{d−1} (paper Eq. (8), J⋆ = P_u(V + α DΦ − ρ⋆ I)|_T);
it is the Jacobian of v ↦ Bᵀ g(unit(u + B v)) at v = 0 at *every* u, not only at zeros, which the tests
check against central finite differences. DΦ(u) comes from ``torch.func.jacrev`` (d reverse passes in one
vmapped call), DF of ``ov`` is V itself.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
from torch import nn

from geosteer.dynamics.ov import OV_NORMS, ov_weights, sphere_gain
from geosteer.errors import GeosteerError
from geosteer.models.anatomy import anatomy

FIELDS = ("ov", "ffn", "full")
LABELS = ("A", "S", "R")


def check_field(name: str) -> str:
    if name not in FIELDS:
        raise GeosteerError(f"unknown field '{name}'; valid: {', '.join(FIELDS)}")
    return name


class _RMSNorm64(nn.Module):
    """RMSNorm in float64 throughout (HF's RMSNorms compute in float32 whatever the input dtype).

    The gain is read by applying the original module to the all-ones vector (rms = 1), which covers both
    the γ and Gemma's (1 + w) conventions."""

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.eps = float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6)))
        p = next(norm.parameters())
        ones = torch.ones(1, p.shape[-1], dtype=p.dtype, device=p.device)
        with torch.no_grad():
            gain = norm(ones)[0].double().cpu() * math.sqrt(1.0 + self.eps)
        self.register_buffer("weight", gain)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps) * self.weight


def _norm64(norm: nn.Module) -> nn.Module:
    if "RMSNorm" in type(norm).__name__:
        return _RMSNorm64(norm)
    return copy.deepcopy(norm).double().cpu()


class _FFNBranch(nn.Module):
    """A float64 copy of one block's FFN branch: Φ(z) = mlp_update(mlp(mlp_norm(z)))."""

    def __init__(self, block) -> None:
        super().__init__()
        self.norm = _norm64(block.mlp_norm)
        self.mlp = copy.deepcopy(block.mlp).double().cpu()
        self.post = _norm64(block.mlp_update) if block.mlp_update is not block.mlp else None
        for p in self.parameters():
            p.requires_grad_(False)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        y = self.mlp.forward(self.norm.forward(z))
        y = y[0] if isinstance(y, (tuple, list)) else y
        return self.post.forward(y) if self.post is not None else y


def _ov_sum_direct(an, layer: int) -> torch.Tensor | None:
    """Σ_h W_O,h W_V,g(h) from separate ``v_proj`` / ``o_proj`` Linear weights (Llama, Qwen, Mistral, Gemma),
    or None for other layouts. One matmul: o_proj.weight (d, H·dv) @ the kv rows repeated per query head."""
    attn = an.blocks[layer].attn
    v, o = getattr(attn, "v_proj", None), getattr(attn, "o_proj", None)
    if not (isinstance(v, nn.Linear) and isinstance(o, nn.Linear)):
        return None
    dv = an.head_dim
    wv = v.weight.detach().double().cpu().view(an.n_kv_heads, dv, an.d_model)
    rep = wv[torch.arange(an.n_heads) // an.n_rep].reshape(an.n_heads * dv, an.d_model)
    return o.weight.detach().double().cpu() @ rep


@torch.no_grad()
def effective_ov(model: nn.Module, layer: int, ov_norm: str = "gain") -> torch.Tensor:
    """The layer's effective OV map V (d × d, float64, acts on column vectors); see the module docstring."""

    if ov_norm not in OV_NORMS:
        raise GeosteerError(f"unknown ov_norm '{ov_norm}'; valid: {', '.join(OV_NORMS)}")
    an = anatomy(model)
    an.check_layers([layer])
    m = _ov_sum_direct(an, layer)
    if m is None:  # fused / interleaved projections: read by probing (one forward over d + 1 tokens)
        w_v, w_o = ov_weights(model)[layer]
        m = sum((w_v[h // an.n_rep].double() @ w_o[h].double()) for h in range(an.n_heads)).T  # (d, d)
    if ov_norm == "none":
        return m.contiguous()
    return (m * sphere_gain(model, layer)[None, :]).contiguous()  # the pre-norm's map on the unit sphere


@dataclass
class ReducedField:
    """One reduced field of one layer: ``kind`` in :data:`FIELDS`, FFN gain ``alpha`` (``full`` only)."""

    kind: str
    V: torch.Tensor | None = None
    phi: nn.Module | None = None
    alpha: float = 1.0

    def __post_init__(self) -> None:
        check_field(self.kind)
        if self.kind in ("ov", "full") and self.V is None:
            raise ValueError(f"field '{self.kind}' needs V")
        if self.kind in ("ffn", "full") and self.phi is None:
            raise ValueError(f"field '{self.kind}' needs Φ")
        if not math.isfinite(self.alpha):
            raise GeosteerError(f"alpha must be finite (got {self.alpha})")

    @property
    def d(self) -> int:
        return self.V.shape[0] if self.V is not None else int(self.phi.norm.weight.shape[0])

    def ambient(self, u: torch.Tensor) -> torch.Tensor:
        """F(u) for u (..., d) float64."""
        if self.kind == "ov":
            return u @ self.V.T
        if self.kind == "ffn":
            return self.phi(u)
        return u @ self.V.T + self.alpha * self.phi(u)

    def __call__(self, u: torch.Tensor) -> torch.Tensor:
        """g(u) = P_u F(u)."""
        f = self.ambient(u)
        return f - (f * u).sum(-1, keepdim=True) * u

    def score(self, u: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
        """Zero score ‖g(u)‖ / (‖F(u)‖ + ε) (= |sin| of the angle between u and F(u))."""
        f = self.ambient(u)
        g = f - (f * u).sum(-1, keepdim=True) * u
        return g.norm(dim=-1) / (f.norm(dim=-1) + eps)

    def to(self, dtype: torch.dtype) -> ReducedField:
        """A copy in ``dtype`` (the search runs in float32, labels and refinement in float64)."""
        return ReducedField(self.kind, V=None if self.V is None else self.V.to(dtype),
                            phi=None if self.phi is None else copy.deepcopy(self.phi).to(dtype), alpha=self.alpha)

    def ambient_jacobian(self, u: torch.Tensor) -> torch.Tensor:
        """DF(u) (d × d) at one direction u (d,)."""
        if self.kind == "ov":
            return self.V
        dphi = torch.func.jacrev(lambda z: self.phi(z[None])[0])(u)
        return dphi if self.kind == "ffn" else self.V + self.alpha * dphi


def layer_fields(model: nn.Module, layer: int, kinds=FIELDS, alpha: float = 1.0,
                 ov_norm: str = "gain") -> dict[str, ReducedField]:
    """The requested reduced fields of ``layer`` (float64 copies; the model is not touched)."""

    an = anatomy(model)
    an.check_layers([layer])
    kinds = [check_field(k) for k in kinds]
    V = effective_ov(model, layer, ov_norm) if any(k in ("ov", "full") for k in kinds) else None
    phi = _FFNBranch(an.blocks[layer]).cpu() if any(k in ("ffn", "full") for k in kinds) else None
    return {k: ReducedField(k, V=V if k != "ffn" else None, phi=phi if k != "ov" else None, alpha=alpha)
            for k in kinds}


def tangent_basis(u: torch.Tensor) -> torch.Tensor:
    """Orthonormal basis (d × (d−1)) of the tangent space u⊥ at the unit vector u (a Householder reflection
    H with H e₁ = ±u; its other columns span u⊥)."""
    d = u.shape[0]
    e1 = torch.zeros_like(u)
    e1[0] = 1.0
    s = -1.0 if u[0] >= 0 else 1.0  # w = u − s e₁ never cancels
    w = u - s * e1
    w = w / w.norm()
    H = torch.eye(d, dtype=u.dtype, device=u.device) - 2.0 * torch.outer(w, w)
    return H[:, 1:]


def tangent_jacobian(field: ReducedField, u: torch.Tensor, basis: torch.Tensor | None = None) -> torch.Tensor:
    """J = Bᵀ DF(u) B − ⟨u, F(u)⟩ I, the linearisation of g at u in tangent coordinates ((d−1) × (d−1))."""
    B = tangent_basis(u) if basis is None else basis
    rho = (field.ambient(u[None])[0] * u).sum()
    J = B.T @ field.ambient_jacobian(u) @ B
    return J - rho * torch.eye(J.shape[0], dtype=J.dtype, device=J.device)


def classify(eigvals: torch.Tensor) -> dict:
    """Label a tangent spectrum: A-like (all real parts < 0), R-like (all > 0), S-like (mixed or a zero)."""
    re = eigvals.real
    n_pos, n_neg = int((re > 0).sum()), int((re < 0).sum())
    label = "A" if n_pos == 0 and n_neg == re.numel() else "R" if n_neg == 0 and n_pos == re.numel() else "S"
    return {"label": label, "n_pos": n_pos, "n_neg": n_neg, "max_real": float(re.max()),
            "min_real": float(re.min()), "max_abs_imag": float(eigvals.imag.abs().max()),
            "n_complex": int((eigvals.imag.abs() > 1e-9 * eigvals.abs().max().clamp_min(1e-300)).sum())}
