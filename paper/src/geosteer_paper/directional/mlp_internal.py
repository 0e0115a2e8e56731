"""MLP-internal component scaling (paper App. D, Eqs. 13-14, Table 10).

The MLP's carrier h (the input of its down projection: φ(W_gate x) ⊙ W_up x in gated MLPs, φ(W_in x)
otherwise) is cut into groups of d = d_model coordinates, h_g = h[I_g], so each has the dimension of the
MLP input x (the normed residual state the MLP reads). With P(u; r) = s∥·u∥r + s⊥·u⊥r:

- ``carrier``  ỹ = Σ_g W_down[:, I_g] P(h_g; x)      (Eq. 13: the grouped carrier relative to x)
- ``contrib``  ỹ = Σ_g P(y_g; h_g), y_g = W_down[:, I_g] h_g   (Eq. 14: each group's contribution rel. to h_g)

When the intermediate size is not a multiple of d (SmolLM2: 1536 = 2·576 + 384), the last partial group
has no d-dimensional reference and is left unedited (``MLPInternalScale.coverage`` says how much is edited).
The down projection's bias, if any, is added once and never scaled.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from geosteer.directional.config import check_scale
from geosteer.directional.decompose import decompose
from geosteer.directional.sites import ComponentScale
from geosteer.errors import GeosteerError
from geosteer.interventions import steer
from geosteer.models.anatomy import anatomy, child_named
from geosteer.models.limits import check_positions
from geosteer_paper.directional.views import _next_token_loss

MLP_INTERNAL_SITES = ("carrier", "contrib")
_DOWN_NAMES = ("down_proj", "c_proj", "dense_4h_to_h", "fc2", "w2")


def down_projection(mlp: nn.Module) -> nn.Module:
    """The MLP's down projection (found by its conventional attribute name)."""
    return child_named(mlp, _DOWN_NAMES, "down projection")


def _scale(u: torch.Tensor, ref: torch.Tensor, sp: float, sq: float) -> torch.Tensor:
    _, par, perp = decompose(u, ref)
    return sp * par + sq * perp


def carrier_edit(h: torch.Tensor, x: torch.Tensor, sp: float, sq: float) -> torch.Tensor:
    """Eq. 13 on the carrier: each full group h_g → P(h_g; x); a partial last group is kept."""
    d = x.shape[-1]
    g = h.shape[-1] // d
    hg = h[..., : g * d].unflatten(-1, (g, d))
    new = _scale(hg.float(), x.float()[..., None, :], sp, sq).to(h.dtype).flatten(-2)
    return torch.cat([new, h[..., g * d:]], dim=-1)


def group_contributions(down: nn.Module, h: torch.Tensor, d: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y_g (…, G, d_out), the partial group's contribution (…, d_out), bias (d_out,)) with
    Σ_g y_g + rest + bias = down(h). One masked down-projection per group (a study tool, not fast)."""
    bias = down.forward(h.new_zeros(1, h.shape[-1]))[0]
    g = h.shape[-1] // d
    parts = []
    for i in range(g):
        m = torch.zeros_like(h)
        m[..., i * d:(i + 1) * d] = h[..., i * d:(i + 1) * d]
        parts.append(down.forward(m) - bias)
    rest = torch.zeros_like(parts[0]) if h.shape[-1] == g * d else \
        down.forward(torch.cat([torch.zeros_like(h[..., : g * d]), h[..., g * d:]], -1)) - bias
    return torch.stack(parts, dim=-2), rest, bias


class MLPInternalScale:
    """Intervention: s∥/s⊥ scaling at an MLP-internal site (``carrier`` or ``contrib``) on ``layers``."""

    def __init__(self, site: str, s_par: float = 1.0, s_perp: float = 1.0,
                 layers: Sequence[int] | None = None) -> None:
        if site not in MLP_INTERNAL_SITES:
            raise GeosteerError(f"unknown MLP-internal site '{site}'; valid: {', '.join(MLP_INTERNAL_SITES)}")
        self.site, self.layers = site, None if layers is None else [int(i) for i in layers]
        self.s_par, self.s_perp = check_scale("s_par", s_par), check_scale("s_perp", s_perp)

    def __repr__(self) -> str:
        return f"MLPInternalScale({self.site!r}, s_par={self.s_par}, s_perp={self.s_perp}, layers={self.layers})"

    @staticmethod
    def coverage(model: nn.Module) -> float:
        """Fraction of carrier coordinates in full d-sized groups (the edited part)."""
        an = anatomy(model)
        down = down_projection(an.blocks[0].mlp)
        inter = down.weight.shape[1] if isinstance(down, nn.Linear) else down.weight.shape[0]
        return (inter // an.d_model) * an.d_model / inter

    def attach(self, model: nn.Module) -> Callable[[], None]:
        an = anatomy(model)
        layers = an.check_layers(self.layers)
        sp, sq = self.s_par, self.s_perp
        handles = []
        for i in layers:
            blk = an.blocks[i]
            down = down_projection(blk.mlp)
            slot: dict[str, torch.Tensor] = {}

            def keep_x(mod, args, kwargs, slot=slot):
                slot["x"] = args[0] if args else next(iter(kwargs.values()))

            handles.append(blk.mlp.register_forward_pre_hook(keep_x, with_kwargs=True))
            if sp == 1.0 and sq == 1.0:
                continue  # neutral: nothing to edit (the stock path, bit for bit)
            if self.site == "carrier":
                def pre(mod, args, slot=slot):
                    return (carrier_edit(args[0], slot["x"], sp, sq), *args[1:])

                handles.append(down.register_forward_pre_hook(pre))
            else:
                def post(mod, args, out, slot=slot, d=an.d_model):
                    h = args[0]
                    yg, rest, bias = group_contributions(mod, h, d)
                    g = yg.shape[-2]
                    hg = h[..., : g * d].unflatten(-1, (g, d))
                    return (_scale(yg.float(), hg.float(), sp, sq).sum(-2) + rest + bias).to(out.dtype)

                handles.append(down.register_forward_hook(post))

        def remove() -> None:
            for h in reversed(handles):
                h.remove()

        return remove


@torch.no_grad()
def mlp_internal_study(model: nn.Module, ids: torch.Tensor, layers: Sequence[int] | None = None) -> list[dict]:
    """Table 10: Δ next-token loss (edited − baseline) of Full No-Para (s∥ = 0) and Full No-Perp (s⊥ = 0) at
    the residual MLP output and the two internal sites, all ``layers`` edited."""
    check_positions(model, ids.shape[-1], "window length")

    base = _next_token_loss(model, ids)
    rows = []
    for geometry in ("mlp_out", "carrier", "contrib"):
        for setting, (sp, sq) in (("no_para", (0.0, 1.0)), ("no_perp", (1.0, 0.0))):
            iv = ComponentScale("mlp_out", sp, sq, layers=layers) if geometry == "mlp_out" else \
                MLPInternalScale(geometry, sp, sq, layers)
            with steer(model, iv):
                loss = _next_token_loss(model, ids)
            rows.append({"geometry": geometry, "setting": setting, "s_par": sp, "s_perp": sq, "loss": loss,
                         "loss_baseline": base, "delta_loss": loss - base})
    return rows
