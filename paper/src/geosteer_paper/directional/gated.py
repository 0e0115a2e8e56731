"""The paper's gated control (Appendix E, Fig. 8): a learned, tokenwise parallel scale s∥ = σ(wᵀx).

ỹ = y + (s∥ − 1)·α·ref with s⊥ = 1 (``ComponentScale`` with a tensor s∥). The paper leaves x, sharing and
start open; the defaults here: ``site="value_full"`` (its pretraining site), ``gate_input="normed"`` (the
attention input after its norm, on one scale at every layer; ``"resid"``: the block input),
``per_head=False`` (one w per layer), w = 0 at start (s∥ = 0.5), no bias.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from geosteer.attention import attach_handlers
from geosteer.directional.sites import scaled_delta
from geosteer.directional.value import self_weight
from geosteer.errors import GeosteerError
from geosteer.hooks import _hidden_from_args, attach_hooks
from geosteer.models.anatomy import anatomy

GATED_SITES = ("value_full", "value_exclude_self", "attn_out")
GATE_INPUTS = ("normed", "resid")


class GatedParallelScale(nn.Module):
    """s∥ = σ(w_ℓᵀ x_t) per layer ℓ and token t (per head with ``per_head``), s⊥ = 1, at ``site``.

    Build it for a model (``GatedParallelScale(model, ...)``: the gate sizes come from its anatomy), then
    ``attach(model)`` (or ``geosteer.steer(model, gate)``). ``last_gates`` holds the s∥ of the most recent
    forward per layer (detached), for reporting the learned gate values.
    """

    def __init__(self, model: nn.Module, site: str = "value_full", layers: Sequence[int] | None = None,
                 gate_input: str = "normed", per_head: bool = False, init: float = 0.0) -> None:
        super().__init__()
        if site not in GATED_SITES:
            raise GeosteerError(f"unknown gated site '{site}'; valid: {', '.join(GATED_SITES)}")
        if gate_input not in GATE_INPUTS:
            raise GeosteerError(f"unknown gate input '{gate_input}'; valid: {', '.join(GATE_INPUTS)}")
        if per_head and site == "attn_out":
            raise GeosteerError("per_head gates need a value site (the residual site has no heads)")
        an = anatomy(model)
        self.site, self.gate_input, self.per_head = site, gate_input, per_head
        self.layers = an.check_layers(list(layers) if layers is not None else None)
        out = an.n_heads if per_head else 1
        self.weight = nn.Parameter(torch.full((len(self.layers), out, an.d_model), float(init)))
        self._row = {layer: i for i, layer in enumerate(self.layers)}
        self._x: dict[int, torch.Tensor] = {}
        self.last_gates: dict[int, torch.Tensor] = {}

    def gate(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """s∥ for ``x`` (b, q, d) at ``layer``: (b, q, 1) or (b, q, n_heads)."""
        w = self.weight[self._row[layer]]  # (out, d)
        s = torch.sigmoid(x.to(w.dtype) @ w.T)
        self.last_gates[layer] = s.detach()
        return s

    def attach(self, model: nn.Module) -> Callable[[], None]:
        an = anatomy(model)
        removers: list[Callable[[], None]] = []

        def remove() -> None:
            while removers:
                removers.pop()()
            self._x.clear()

        try:
            for layer in self.layers:  # capture this forward's gate input per layer
                block = an.blocks[layer]
                if self.gate_input == "normed":
                    h = block.attn_norm.register_forward_hook(
                        lambda mod, args, out, layer=layer: self._x.__setitem__(layer, out))
                else:
                    h = block.layer.register_forward_pre_hook(
                        lambda mod, args, kwargs, layer=layer: self._x.__setitem__(
                            layer, _hidden_from_args(args, kwargs)[0]), with_kwargs=True)
                removers.append(h.remove)
            if self.site == "attn_out":
                def fn(a, ctx):
                    s = self.gate(ctx.layer, self._x[ctx.layer])  # (b, q, 1)
                    return a + scaled_delta(a, ctx.state["resid_pre"], s.squeeze(-1).to(a.dtype), 1.0)
                removers.append(attach_hooks(model, "attn_out", self.layers, fn))
            else:
                removers.append(attach_handlers(model, self.layers, self._value_handler))
        except Exception:
            remove()
            raise
        return remove

    def _value_handler(self, layer: int):
        def handler(call, proceed):
            out, w = proceed(call)
            b, q, h, dv = out.shape
            hkv = call.key.shape[1]
            o = out.float().reshape(b, q, hkv, h // hkv, dv)
            v = call.value[:, :, call.value.shape[2] - q:].float().transpose(1, 2).unsqueeze(3)  # (b,q,Hkv,1,dv)
            y = o
            if self.site == "value_exclude_self":
                y = o - self_weight(call).permute(0, 3, 1, 2).unsqueeze(-1) * v
            s = self.gate(layer, self._x[layer][:, -q:]).float()  # (b, q, 1|H)
            s = s.reshape(b, q, 1, 1) if s.shape[-1] == 1 else s.reshape(b, q, hkv, h // hkv)
            new = o + scaled_delta(y, v, s, 1.0)
            return new.reshape(b, q, h, dv).to(out.dtype), w

        return handler

    def mean_gate(self) -> dict[int, float]:
        """Mean s∥ per layer over the last forward's tokens (padding included)."""
        return {layer: float(s.float().mean()) for layer, s in self.last_gates.items()}
