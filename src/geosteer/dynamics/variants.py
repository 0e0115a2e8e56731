"""Branch-level interventions of the FFN steering field: FFN variants, gains, parallel blocks.

Built on the named hook points (sequential and parallel blocks alike). Φ is decomposed at
u = unit(mlp_in), the state the FFN reads (paper Eq. (2), (19)).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from geosteer.dynamics import sphere
from geosteer.dynamics.config import check_variant
from geosteer.hooks import attach_hooks
from geosteer.models.anatomy import anatomy
from geosteer.served import Form


def _layers(model: nn.Module, layers: Sequence[int] | None) -> list[int]:
    return anatomy(model).check_layers(layers)


def _zero(x: torch.Tensor, ctx) -> torch.Tensor:
    return torch.zeros_like(x)


# Reference direction of the radial/tangential split: "read" = unit(mlp_in), the state
# the FFN reads (x + A in a sequential block; the default), "input" = unit(resid_pre), the block input x.
REFERENCES = {"read": "mlp_in", "input": "resid_pre"}


def _split(part: str, reference: str, skip_first: bool):
    key = REFERENCES[reference]

    def fn(phi: torch.Tensor, ctx) -> torch.Tensor:
        u = sphere.unit(ctx.state[key].to(phi.dtype))
        out = sphere.radial(u, phi) if part == "radial" else sphere.tangential(u, phi)
        return _keep_first(phi, out) if skip_first else out

    return fn


def _keep_first(stock: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Position 0 (BOS) keeps its stock update."""
    out = out.clone()
    out[:, :1] = stock[:, :1]
    return out


@dataclass
class FFNVariant:
    """One of the five forward variants of paper §4 (Fig. 3) on ``layers`` (None = all): ``full`` (stock),
    ``zero`` (Φ → 0), ``radial`` (⟨u, Φ⟩u), ``tangential`` (P_u Φ), ``attn_zero`` (A → 0). ``reference``:
    ``"read"`` or ``"input"``; ``skip_first`` keeps position 0's stock update.
    """

    variant: str = "full"
    layers: Sequence[int] | None = None
    reference: str = "read"
    skip_first: bool = False

    def __post_init__(self) -> None:
        check_variant(self.variant)
        if self.reference not in REFERENCES:
            raise ValueError(f"unknown reference '{self.reference}'; valid: {', '.join(REFERENCES)}")

    def attach(self, model: nn.Module) -> Callable[[], None]:
        layers = _layers(model, self.layers)
        if self.variant == "full":
            return lambda: None
        if self.variant in ("attn_zero", "zero"):
            fn = (lambda x, ctx: _keep_first(x, _zero(x, ctx))) if self.skip_first else _zero
            return attach_hooks(model, "attn_out" if self.variant == "attn_zero" else "mlp_out", layers, fn)
        return attach_hooks(model, "mlp_out", layers, _split(self.variant, self.reference, self.skip_first))

    def served_ops(self, ops) -> None:
        """The same edit on each served layer (``geosteer.served``): Φ (or A) replaced, rows at a time."""
        if self.variant == "full":
            return
        key = REFERENCES[self.reference]
        part = self.variant

        def fn(t, st, tokens):
            if part in ("zero", "attn_zero"):
                out = torch.zeros_like(t)
            else:
                u = sphere.unit(st[key].to(t.dtype))
                out = sphere.radial(u, t) if part == "radial" else sphere.tangential(u, t)
            if self.skip_first:  # position 0 (BOS) keeps its stock update
                out = torch.where((tokens.positions == 0).unsqueeze(-1), t, out)
            return out

        # as ∥/⊥ scaling against the reference: radial keeps ∥ (1, 0), tangential ⊥ (0, 1), zero neither
        s_par, s_perp = {"radial": (1.0, 0.0), "tangential": (0.0, 1.0)}.get(part, (0.0, 0.0))
        form = Form(s_par, s_perp, key if part in ("radial", "tangential") else None, skip_first=self.skip_first)
        for layer in ops.chosen(self.layers):
            ops.edit(layer, "attn_out" if part == "attn_zero" else "mlp_out", fn, form)


@dataclass
class Gains:
    """x_{ℓ+1} = x_ℓ + β_A A_ℓ + α_F Φ_ℓ (App. C.1, Eq. (24)) on ``layers``; gains of 1 attach nothing."""

    beta_attn: float = 1.0
    alpha_ffn: float = 1.0
    layers: Sequence[int] | None = None

    def attach(self, model: nn.Module) -> Callable[[], None]:
        layers = _layers(model, self.layers)
        removers = []
        for point, g in (("attn_out", float(self.beta_attn)), ("mlp_out", float(self.alpha_ffn))):
            if g != 1.0:
                removers.append(attach_hooks(model, point, layers, lambda x, ctx, g=g: x * g))

        def remove() -> None:
            for r in reversed(removers):
                r()

        return remove

    def served_ops(self, ops) -> None:
        for point, g in (("attn_out", float(self.beta_attn)), ("mlp_out", float(self.alpha_ffn))):
            if g != 1.0:
                for layer in ops.chosen(self.layers):
                    ops.edit(layer, point, lambda t, st, tokens, g=g: t * g, Form(g, g))


@dataclass
class Parallelize:
    """Replace blocks ``layers`` by the parallel surrogate x + A(x) + Φ(x) (paper §4, Eq. (21)→(22)).

    The FFN branch is fed the block input (``resid_pre``) instead of x + A(x) through the ``mlp_in``
    hook; the residual sum itself is untouched. On a parallel-residual block this is a no-op.
    """

    layers: Sequence[int] = ()

    def attach(self, model: nn.Module) -> Callable[[], None]:
        if not list(self.layers):  # no layer parallelised: the stock model (a neutral setting)
            return lambda: None
        layers = _layers(model, list(self.layers))
        return attach_hooks(model, "mlp_in", layers, lambda x, ctx: ctx.state["resid_pre"])

    def served_ops(self, ops) -> None:
        for layer in list(self.layers):
            ops.edit(layer, "mlp_in", lambda t, st, tokens: st["resid_pre"], Form(replace=True))
