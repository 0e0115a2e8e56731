"""Attention-diagonal views of parallel scaling (paper Eq. 12, Table 5, Figure 4).

Holding every off-diagonal message fixed, a change ΔA_tt of the diagonal attention weight adds ΔA_tt·m_t
(the self message) to the edited output. Table 5 gives the scalar that realises s∥-scaling (s⊥ = 1):

- value space, full aggregate      ΔA_tt = (s∥−1)·o_tᵀv_t / ‖v_t‖²                    exact (o_t moves along v_t)
- value space, exclude-self        ΔA_tt = (s∥−1)·c_tᵀv_t / ‖v_t‖²,  c_t = o_t − A_tt v_t  exact likewise
- residual space (attention)       ΔA_tt = (s∥−1)·Δᵀz_t / ((W_O v_t)ᵀz_t)             matches only the
  z-component (the scalar constraint): ΔA_tt·W_O v_t has a perpendicular part the real edit does not.

Value-space forms are per head (the block-diagonal operator) or, with ``value_space="concat"``, one scalar
per token shared by all heads. The residual form applies one scalar to every head's diagonal (v_t is the
concatenation of all heads' own values, W_O the bias-free output projection); it needs the attention
branch output to be linear in the aggregate, so it is undefined for sandwich-norm blocks (Gemma-3).
Removed case: s∥ = 0; Ã_tt = A_tt + ΔA_tt.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from geosteer.attention import AttentionCall, attach_handlers, attention_weights, repeat_kv
from geosteer.errors import GeosteerError
from geosteer.hooks import attach_hooks
from geosteer.models.anatomy import anatomy, child_named

_OUT_PROJ_NAMES = ("o_proj", "c_proj", "dense", "out_proj")


def output_projection(attn: nn.Module) -> nn.Module:
    """The attention module's output projection W_O (found by its conventional attribute name)."""
    return child_named(attn, _OUT_PROJ_NAMES, "output projection")


def apply_linear(proj: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """W_O x without the bias: proj(x) − proj(0) (exact for Linear / GPT-2 Conv1D)."""
    x = x.to(next(proj.parameters()).dtype)
    return proj.forward(x) - proj.forward(torch.zeros_like(x[..., :1, :]))


def _alpha(y: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    rr = (ref * ref).sum(-1)
    return torch.where(rr > 0, (y * ref).sum(-1) / rr.clamp_min(1e-300), torch.zeros_like(rr))


def value_diagonal_change(call: AttentionCall, site: str, s_par: float,
                          value_space: str = "head") -> tuple[torch.Tensor, torch.Tensor]:
    """(ΔA_tt (b, H, q), the materialised stock weights A (b, H, q, k)) for a value site, in float64.

    ``site``: ``value_full`` (reference o_t) or ``value_exclude_self`` (c_t). Computed from the
    materialised attention matrix (``attention_weights``), independently of the editing handler.
    """
    if site not in ("value_full", "value_exclude_self"):
        raise GeosteerError(f"value diagonal form needs value_full or value_exclude_self (got '{site}')")
    w = attention_weights(call).double()
    v = repeat_kv(call.value, call.n_rep).double()  # (b, H, k, dv)
    q_len, k_len = w.shape[2], w.shape[3]
    off = k_len - q_len
    vt = v[:, :, off:]  # (b, H, q, dv)
    idx = torch.arange(q_len, device=w.device)
    a_tt = w[..., idx, idx + off]
    y = w @ v
    if site == "value_exclude_self":
        y = y - a_tt[..., None] * vt
    if value_space == "concat":
        b, h, q, dv = y.shape
        flat = lambda t: t.permute(0, 2, 1, 3).reshape(b, 1, q, h * dv)  # noqa: E731
        alpha = _alpha(flat(y), flat(vt)).expand(b, h, q)
    else:
        alpha = _alpha(y, vt)
    return (s_par - 1.0) * alpha, w


def diagonal_edited_output(call: AttentionCall, delta: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Σ_s Ã_ts v_s with Ã = A + diag(ΔA): the output (b, q, H, dv) that the diagonal change gives."""
    w = weights.clone()
    q_len, k_len = w.shape[2], w.shape[3]
    idx = torch.arange(q_len, device=w.device)
    w[..., idx, idx + (k_len - q_len)] += delta
    return (w @ repeat_kv(call.value, call.n_rep).double()).permute(0, 2, 1, 3)


def concat_own_values(call: AttentionCall) -> torch.Tensor:
    """v_t of every query head, concatenated in W_O's input order: (b, q, H·dv)."""
    v = repeat_kv(call.value, call.n_rep)
    q_len = call.query.shape[2]
    vt = v[:, :, v.shape[2] - q_len:]  # (b, H, q, dv)
    b, h, q, dv = vt.shape
    return vt.permute(0, 2, 1, 3).reshape(b, q, h * dv)


def residual_diagonal_change(update: torch.Tensor, z: torch.Tensor, wo_vt: torch.Tensor,
                             s_par: float) -> torch.Tensor:
    """Table 5 residual form: (s∥−1)·Δᵀz / ((W_O v_t)ᵀz), per token (shape ``update.shape[:-1]``)."""
    update, z, wo_vt = update.double(), z.double(), wo_vt.double()
    return (s_par - 1.0) * (update * z).sum(-1) / (wo_vt * z).sum(-1)


def linear_attention_branch(model: nn.Module) -> bool:
    """Whether the residual attention update is the attention module's own output (no post-branch norm)."""
    an = anatomy(model)
    return an.blocks[0].attn_update is an.blocks[0].attn


class DiagonalCapture:
    """Read-only intervention keeping, per layer, the attention call, the block input z and the update A."""

    def __init__(self, layers: Sequence[int]) -> None:
        self.layers = list(layers)
        self.calls: dict[int, AttentionCall] = {}
        self.z: dict[int, torch.Tensor] = {}
        self.update: dict[int, torch.Tensor] = {}

    def attach(self, model: nn.Module):

        def make(i: int):
            def grab(call, proceed):
                self.calls[i] = call
                return proceed(call)

            return grab

        def keep(a, ctx):
            self.z[ctx.layer] = ctx.state["resid_pre"].detach()
            self.update[ctx.layer] = a.detach()

        detach_handlers = attach_handlers(model, self.layers, make)
        try:
            detach_hooks = attach_hooks(model, "attn_out", self.layers, keep)
        except Exception:
            detach_handlers()
            raise

        def remove() -> None:
            detach_handlers()
            detach_hooks()

        return remove


def layer_views(model: nn.Module, cap: DiagonalCapture, layer: int, s_par: float = 0.0,
                value_space: str = "head") -> dict[str, torch.Tensor | None]:
    """Diagonal changes at one captured layer: ``weights`` (b, H, q, k), ``value_full`` and
    ``value_exclude_self`` ΔA (b, H, q), ``residual`` ΔA (b, q) or None (non-linear attention branch),
    and ``residual_denominator`` (W_O v_t)ᵀz_t (b, q)."""
    call = cap.calls[layer]
    full, w = value_diagonal_change(call, "value_full", s_par, value_space)
    excl, _ = value_diagonal_change(call, "value_exclude_self", s_par, value_space)
    out: dict[str, torch.Tensor | None] = {"weights": w, "value_full": full, "value_exclude_self": excl,
                                           "residual": None, "residual_denominator": None}
    if linear_attention_branch(model):
        proj = output_projection(anatomy(model).blocks[layer].attn)
        with torch.no_grad():
            wo_vt = apply_linear(proj, concat_own_values(call))
        z, upd = cap.z[layer], cap.update[layer]
        out["residual"] = residual_diagonal_change(upd, z, wo_vt, s_par)
        out["residual_denominator"] = (wo_vt.double() * z.double()).sum(-1)
    return out
