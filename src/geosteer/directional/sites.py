"""Component-scaling interventions at every site (paper Eqs. 10-11), composable through ``geosteer.steer``.

Residual sites use the branch hook points (``attn_out``, ``mlp_out``, ``resid_post``) with the reference
read from ``ctx.state`` (this forward's block input / MLP residual input). Value sites are attention
handlers (``geosteer.attention.add_attention_handler``) that edit the aggregate o_t per head.

Every edit is written as y + (s∥−1)·y∥ + (s⊥−1)·y⊥, which equals s∥·y∥ + s⊥·y⊥ and returns y unchanged at
s∥ = s⊥ = 1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from geosteer.attention import add_attention_handler, use_geosteer_attention
from geosteer.directional.config import ComponentScaleConfig
from geosteer.directional.decompose import decompose
from geosteer.directional.value import (
    grouped_output,
    own_values,
    self_weight,
    ungrouped_output,
    without_diagonal_mask,
)
from geosteer.hooks import HookSet, add_hook
from geosteer.models.anatomy import anatomy


def _scaled_delta(y: torch.Tensor, ref: torch.Tensor, s_par: float, s_perp: float) -> torch.Tensor:
    """(s∥−1)·y∥ + (s⊥−1)·y⊥: what Eq. 11 adds to y."""
    _, par, perp = decompose(y, ref)
    return (s_par - 1.0) * par + (s_perp - 1.0) * perp


class ComponentScale:
    """ỹ = s∥·y∥ + s⊥·y⊥ at ``site`` on ``layers`` (None = all). See ``config.SITES`` for the sites.

    ``ComponentScale("value_exclude_self", s_par=0.0)`` is the paper's V-Excl.-self removal;
    ``ComponentScale("diag_removal")`` is the A_tt = 0 control (scales are ignored there).
    """

    def __init__(self, site: str, s_par: float = 1.0, s_perp: float = 1.0,
                 layers: Sequence[int] | None = None) -> None:
        self.config = ComponentScaleConfig(site, s_par, s_perp, list(layers) if layers is not None else None)

    @classmethod
    def from_config(cls, cfg: ComponentScaleConfig) -> ComponentScale:
        return cls(cfg.site, cfg.s_par, cfg.s_perp, cfg.layers)

    def __repr__(self) -> str:
        c = self.config
        return f"ComponentScale({c.site!r}, s_par={c.s_par}, s_perp={c.s_perp}, layers={c.layers})"

    def attach(self, model: nn.Module) -> Callable[[], None]:
        an = anatomy(model)
        layers = an.check_layers(self.config.layers)
        site = self.config.site
        if site.startswith("resid_"):
            return self._attach_residual(model, layers)
        use_geosteer_attention(model)
        handler = self._value_handler()
        removers = [add_attention_handler(an.blocks[i].attn, handler) for i in layers]

        def remove() -> None:
            for r in reversed(removers):
                r()

        return remove

    # -- residual space -------------------------------------------------------------------------
    def _attach_residual(self, model: nn.Module, layers: list[int]) -> Callable[[], None]:
        sp, sq = self.config.s_par, self.config.s_perp
        site = self.config.site

        if site == "resid_attn":
            point = "attn_out"

            def fn(a, ctx):
                return a + _scaled_delta(a, ctx.state["resid_pre"], sp, sq)
        elif site == "resid_mlp":
            point = "mlp_out"

            def fn(phi, ctx):
                return phi + _scaled_delta(phi, ctx.state["mlp_norm_in"], sp, sq)
        else:  # resid_block
            point = "resid_post"

            def fn(x_out, ctx):
                x = ctx.state["resid_pre"]
                return x_out + _scaled_delta(x_out - x, x, sp, sq)

        hooks = HookSet()
        try:
            for i in layers:
                add_hook(model, point, i, fn, hooks)
        except Exception:
            hooks.remove()
            raise
        return hooks.remove

    # -- value space ----------------------------------------------------------------------------
    def _value_handler(self):
        sp, sq, site = self.config.s_par, self.config.s_perp, self.config.site

        if site == "diag_removal":
            def diag_handler(call, proceed):
                keep = without_diagonal_mask(call)
                out, w = proceed(call.with_(attention_mask=keep))
                # A query whose only visible key was itself attends to nothing: output 0 (not NaN).
                has_other = keep.any(-1)  # (b|1, 1|H, q)
                if not bool(has_other.all()):
                    z = has_other.permute(0, 2, 1)[..., None]  # (b|1, q, 1|H, 1)
                    out = torch.where(z, out, torch.zeros((), dtype=out.dtype))
                return out, w

            return diag_handler

        def value_handler(call, proceed):
            out, w = proceed(call)
            o = grouped_output(out, call).float()
            v = own_values(call).float()
            if site == "value_full":
                new = o + _scaled_delta(o, v, sp, sq)  # Eq. 8 + 11 on the whole aggregate
            else:  # value_exclude_self, Eq. 9-10: c_t = o_t − A_tt·v_t; d_t kept; no renormalisation
                a_tt = self_weight(call)[..., None]
                c = o - a_tt * v
                new = o + _scaled_delta(c, v, sp, sq)
            return ungrouped_output(new, out), w

        return value_handler
