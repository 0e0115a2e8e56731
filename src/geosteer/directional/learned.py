"""Per-layer learned ∥/⊥ scales (the steering form of component scaling, paper Eq. 11).

:class:`LearnedScales` edits y at a residual site as ỹ = y + (s∥_ℓ − 1)·y∥ + (s⊥_ℓ − 1)·y⊥, stock at
s∥ = s⊥ = 1; trained by :func:`geosteer.directional.steer_learn.learn_scales`, saved as the
``geosteer-directional-scales`` artifact (recipe key ``scale_learned=FOLDER``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from geosteer.directional.config import RESIDUAL_SITES
from geosteer.errors import GeosteerError
from geosteer.hooks import attach_hooks
from geosteer.methods import save_artifact
from geosteer.served import Form


def scaled_delta(y: torch.Tensor, ref: torch.Tensor, s_par: torch.Tensor, s_perp: torch.Tensor) -> torch.Tensor:
    """(s∥−1)·y∥ + (s⊥−1)·y⊥ = (s∥−s⊥)·α·ref + (s⊥−1)·y with α = ⟨y, ref⟩/⟨ref, ref⟩ (0 for a zero reference);
    differentiable in both scales (0-d tensors), also at s⊥ = 1."""
    rr = torch.linalg.vecdot(ref, ref)
    alpha = torch.where(rr > 1e-30, torch.linalg.vecdot(y, ref) / rr.clamp_min(1e-30), 0.0)
    return ((s_par - s_perp) * alpha).unsqueeze(-1) * ref + (s_perp - 1.0) * y


class LearnedScales(nn.Module):
    """s∥_ℓ, s⊥_ℓ per layer at a residual ``site`` (parameters ``s_par``, ``s_perp``: one entry per layer)."""

    def __init__(self, site: str, layers: Sequence[int], s_par: Sequence[float] | torch.Tensor | None = None,
                 s_perp: Sequence[float] | torch.Tensor | None = None) -> None:
        super().__init__()
        if site not in RESIDUAL_SITES:
            raise GeosteerError(f"learned scales edit a residual site; valid: {', '.join(RESIDUAL_SITES)} "
                                f"(got '{site}')")
        self.site, self.layers = site, [int(i) for i in layers]
        if not self.layers:
            raise GeosteerError("learned scales need at least one layer")
        n = len(self.layers)
        self.s_par = nn.Parameter(self._values(s_par, n, "s_par"))
        self.s_perp = nn.Parameter(self._values(s_perp, n, "s_perp"))
        self._row = {layer: i for i, layer in enumerate(self.layers)}

    @staticmethod
    def _values(v, n: int, name: str) -> torch.Tensor:
        t = torch.ones(n) if v is None else torch.as_tensor(v, dtype=torch.float32).detach().clone().reshape(-1)
        if t.numel() != n:
            raise GeosteerError(f"{name} holds {t.numel()} values for {n} layers")
        if not bool(torch.isfinite(t).all()):
            raise GeosteerError(f"{name} holds NaN or infinite values")
        return t.float()

    def __repr__(self) -> str:
        return f"LearnedScales({self.site!r}, layers={self.layers})"

    def scales(self) -> list[dict]:
        """One row per layer: ``{"layer", "s_par", "s_perp"}``."""
        return [{"layer": layer, "s_par": float(p), "s_perp": float(q)}
                for layer, p, q in zip(self.layers, self.s_par.detach(), self.s_perp.detach(), strict=True)]

    def at_strength(self, s: float) -> LearnedScales:
        """A copy at strength ``s``: each scale ← 1 + s·(scale − 1), so the edit (s∥−1)·y∥ + (s⊥−1)·y⊥ is × s
        (0: scales of one, the stock model; 1: these scales, returned as they are). Non-finite scales are
        refused."""
        s = float(s)
        if s == 1.0:
            return self
        par, perp = (1.0 + s * (t.detach().float().cpu() - 1.0) for t in (self.s_par, self.s_perp))
        if not bool(torch.isfinite(par).all() and torch.isfinite(perp).all()):
            raise GeosteerError(f"scale_learned_strength={s:g}: the scales 1 + s·(scale − 1) overflow float32")
        out = LearnedScales(self.site, self.layers, par, perp).to(self.s_par.device)
        for name in ("base_model", "n_layers", "meta"):  # what the artifact reader records
            if hasattr(self, name):
                setattr(out, name, getattr(self, name))
        return out

    def attach(self, model: nn.Module) -> Callable[[], None]:
        site, row = self.site, self._row

        def fn(y, ctx):
            i = row[ctx.layer]
            sp, sq = self.s_par[i].to(y), self.s_perp[i].to(y)
            if site == "attn_out":
                return y + scaled_delta(y, ctx.state["resid_pre"], sp, sq)
            if site == "mlp_out":
                return y + scaled_delta(y, ctx.state["mlp_in"], sp, sq)
            x = ctx.state["resid_pre"]  # resid_post: the block update x' − x against the block input x
            return y + scaled_delta(y - x, x, sp, sq)

        return attach_hooks(model, site, self.layers, fn)

    def served_ops(self, ops) -> None:
        """The same per-layer scaling on each served layer (``geosteer.served``)."""
        site = self.site
        for layer, sp, sq in zip(self.layers, self.s_par.detach().tolist(), self.s_perp.detach().tolist(),
                                 strict=True):
            if site == "attn_out":
                ops.edit(layer, site, lambda y, st, tok, sp=sp, sq=sq: y + scaled_delta(y, st["resid_pre"], sp, sq),
                         Form(sp, sq, "resid_pre"))
            elif site == "mlp_out":
                ops.edit(layer, site, lambda y, st, tok, sp=sp, sq=sq: y + scaled_delta(y, st["mlp_in"], sp, sq),
                         Form(sp, sq, "mlp_in"))
            else:  # resid_post: the block update against the block input
                ops.edit(layer, site, lambda y, st, tok, sp=sp, sq=sq:
                         y + scaled_delta(y - st["resid_pre"], st["resid_pre"], sp, sq),
                         Form(sp, sq, "resid_pre", delta=True))

    def save(self, folder, **kw):
        """Write the ``geosteer-directional-scales`` artifact (``geosteer.load`` reads it back)."""

        return save_artifact(self, folder, **kw)
