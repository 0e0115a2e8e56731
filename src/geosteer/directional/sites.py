"""Component-scaling interventions at every site (paper Eqs. 10-11), composable through ``geosteer.steer``.

Residual sites are branch hooks (reference from ``ctx.state``); value sites are attention handlers on o_t
per head. Every edit is y + (s∥−1)·y∥ + (s⊥−1)·y⊥: y unchanged at s∥ = s⊥ = 1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from geosteer.attention import attach_handlers, stock_attention_with_lse
from geosteer.directional.config import DEFAULT_VALUE_SPACE, RESIDUAL_SITES, ComponentScaleConfig, check_heads
from geosteer.directional.value import (
    self_weight,
    self_weight_from_lse,
    without_diagonal_mask,
)
from geosteer.errors import GeosteerError
from geosteer.hooks import attach_hooks
from geosteer.models.anatomy import anatomy
from geosteer.served import Form, ValueScale, scaled_delta


class ComponentScale:
    """ỹ = s∥·y∥ + s⊥·y⊥ at ``site`` (``config.SITES``) on ``layers`` (None = all).

    ``"value_exclude_self"`` with s∥ = 0 is the paper's V-Excl.-self removal, ``"diag_removal"`` the A_tt = 0
    control. Value sites: ``heads`` (paper Fig. 7) and ``value_space="concat"``.
    """

    def __init__(self, site: str, s_par: float = 1.0, s_perp: float = 1.0,
                 layers: Sequence[int] | None = None, heads: Sequence[int] | str | None = None,
                 value_space: str = DEFAULT_VALUE_SPACE) -> None:
        heads = list(heads) if heads is not None and not isinstance(heads, str) else heads
        self.config = ComponentScaleConfig(site, s_par, s_perp, list(layers) if layers is not None else None,
                                           heads, value_space)

    @classmethod
    def from_config(cls, cfg: ComponentScaleConfig) -> ComponentScale:
        return cls(cfg.site, cfg.s_par, cfg.s_perp, cfg.layers, cfg.heads, cfg.value_space)

    def __repr__(self) -> str:
        c = self.config
        extra = f", heads={c.heads}" if c.heads is not None else ""
        extra += f", value_space={c.value_space!r}" if c.value_space != DEFAULT_VALUE_SPACE else ""
        return f"ComponentScale({c.site!r}, s_par={c.s_par}, s_perp={c.s_perp}, layers={c.layers}{extra})"

    def attach(self, model: nn.Module) -> Callable[[], None]:
        an = anatomy(model)
        layers = an.check_layers(self.config.layers)
        check_heads(self.config.heads, an.n_heads)
        site = self.config.site
        if site in RESIDUAL_SITES:
            return self._attach_residual(model, layers)
        handler = self._value_handler()
        return attach_handlers(model, layers, lambda layer: handler)

    def served_ops(self, ops) -> None:
        """The same scaling on each served layer (``geosteer.served``); the sites that need the
        self-attention weight A_tt are refused (paged attention does not expose it)."""
        c = self.config
        if c.site in ("value_exclude_self", "diag_removal"):
            raise GeosteerError(f"scale_site={c.site} cannot be served exactly (it needs the self-attention weight "
                                "A_tt, which paged attention does not expose); use value_full or a residual site "
                                "(attn_out, mlp_out, resid_post)")
        if c.is_neutral:
            return
        sp, sq = c.s_par, c.s_perp
        for layer in ops.chosen(c.layers):
            if c.site == "value_full":
                ops.attention(layer, ValueScale(sp, sq, c.heads, c.value_space == "concat"))
            elif c.site == "attn_out":
                ops.edit(layer, "attn_out", lambda a, st, tok: a + scaled_delta(a, st["resid_pre"], sp, sq),
                         Form(sp, sq, "resid_pre"))
            elif c.site == "mlp_out":
                ops.edit(layer, "mlp_out", lambda f, st, tok: f + scaled_delta(f, st["mlp_in"], sp, sq),
                         Form(sp, sq, "mlp_in"))
            else:  # resid_post
                ops.edit(layer, "resid_post",
                         lambda y, st, tok: y + scaled_delta(y - st["resid_pre"], st["resid_pre"], sp, sq),
                         Form(sp, sq, "resid_pre", delta=True))

    # -- residual space -------------------------------------------------------------------------
    def _attach_residual(self, model: nn.Module, layers: list[int]) -> Callable[[], None]:
        sp, sq = self.config.s_par, self.config.s_perp
        site = self.config.site

        if site == "attn_out":
            point = "attn_out"

            def fn(a, ctx):
                return a + scaled_delta(a, ctx.state["resid_pre"], sp, sq)
        elif site == "mlp_out":
            point = "mlp_out"

            def fn(phi, ctx):
                return phi + scaled_delta(phi, ctx.state["mlp_in"], sp, sq)
        else:  # resid_post
            point = "resid_post"

            def fn(x_out, ctx):
                x = ctx.state["resid_pre"]
                return x_out + scaled_delta(x_out - x, x, sp, sq)

        return attach_hooks(model, point, layers, fn)

    # -- value space ----------------------------------------------------------------------------
    def _head_mask(self, n_heads: int, n_kv: int, device) -> torch.Tensor | None:
        """(1, Hkv, n_rep, 1, 1) bool: the selected query heads (None when all are edited)."""
        heads = self.config.heads
        if heads is None:
            return None
        check_heads(heads, n_heads)
        sel = torch.zeros(n_heads, dtype=torch.bool, device=device)
        sel[heads] = True
        return sel.reshape(1, n_kv, n_heads // n_kv, 1, 1)

    def _value_handler(self):
        sp, sq, site = self.config.s_par, self.config.s_perp, self.config.site
        concat = self.config.value_space == "concat"

        if site == "diag_removal":
            def diag_handler(call, proceed):
                keep = without_diagonal_mask(call)
                sel = self._head_mask(call.query.shape[1], call.key.shape[1], keep.device)
                if sel is not None:  # unselected heads keep their own key: (b|1, H, q, k)
                    from geosteer.attention import additive_mask

                    q_len, k_len = call.query.shape[2], call.key.shape[2]
                    full = additive_mask(call, q_len, k_len)
                    if full is None:
                        full = torch.ones(1, 1, q_len, k_len, dtype=torch.bool, device=keep.device)
                    keep = torch.where(sel.reshape(1, -1, 1, 1), keep, full)
                out, w = proceed(call.with_(attention_mask=keep))
                # A query whose only visible key was itself attends to nothing: output 0 (not NaN).
                has_other = keep.any(-1)  # (b|1, 1|H, q)
                if not bool(has_other.all()):
                    z = has_other.permute(0, 2, 1)[..., None]  # (b|1, q, 1|H, 1)
                    out = torch.where(z, out, torch.zeros((), dtype=out.dtype))
                return out, w

            return diag_handler

        def value_handler(call, proceed):
            fused = None
            if site == "value_exclude_self" and getattr(proceed, "stock_next", False):
                fused = stock_attention_with_lse(call)  # stock kernel + its row log-sum-exp (A_tt for free)
            if fused is not None:
                out, w = fused[0], None
            else:
                out, w = proceed(call)
            # Work in the output's own layout (b, q, Hkv, n_rep, dv): views, no transposed copies.
            b, q, h, dv = out.shape
            hkv = call.key.shape[1]
            o = out.float().reshape(b, q, hkv, h // hkv, dv)
            v = call.value[:, :, call.value.shape[2] - q:].float().transpose(1, 2).unsqueeze(3)  # (b,q,Hkv,1,dv)
            if site == "value_full":
                y = o  # Eq. 8 + 11 on the whole aggregate
            else:  # value_exclude_self, Eq. 9-10: c_t = o_t − A_tt·v_t; d_t kept; no renormalisation
                a_tt = self_weight(call) if fused is None else self_weight_from_lse(call, fused[1])
                y = o - a_tt.permute(0, 3, 1, 2).unsqueeze(-1) * v
            if concat:  # one decomposition of the concatenated heads against the concatenated v_t
                vc = v.expand(o.shape).reshape(b, q, h * dv)
                d = scaled_delta(y.reshape(b, q, h * dv), vc, sp, sq).reshape(o.shape)
            else:
                d = scaled_delta(y, v, sp, sq)
            new = o + d
            sel = self._head_mask(h, hkv, o.device)
            if sel is not None:  # (1, Hkv, n_rep, 1, 1) → (1, 1, Hkv, n_rep, 1)
                new = torch.where(sel.permute(0, 3, 1, 2, 4), new, o)
            return new.reshape(b, q, h, dv).to(out.dtype), w

        return value_handler
