"""What one decoder block sees on calibration text: its linears' inputs and its attention / MLP calls.

``capture_block(model, layer, batches)`` runs ``model`` on each batch up to the end of block ``layer`` (the
rest of the forward is skipped) and keeps, per calibration batch, the input rows of every ``nn.Linear``
of that block and the positional and keyword arguments of its attention and MLP modules, so a quantiser
can replay those modules with candidate weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from geosteer.models.anatomy import anatomy


class _StopForward(Exception):
    """Raised after the captured block: the layers above it are not needed."""


@dataclass
class BlockCapture:
    """Per calibration batch: each linear's input rows (tokens, in_features), attention and MLP calls."""

    linears: dict[str, nn.Linear]
    inputs: dict[str, list[torch.Tensor]] = field(default_factory=dict)
    attn_calls: list[tuple[tuple, dict]] = field(default_factory=list)
    mlp_calls: list[tuple[tuple, dict]] = field(default_factory=list)

    def rows(self, name: str) -> torch.Tensor:
        """All captured input rows of linear ``name``, batches concatenated."""
        return torch.cat(self.inputs[name])


def block_linears_of(block: nn.Module) -> dict[str, nn.Linear]:
    """The ``nn.Linear`` modules of one block, by name inside it."""
    return {n: m for n, m in block.named_modules() if isinstance(m, nn.Linear)}


@torch.no_grad()
def capture_block(model: nn.Module, layer: int, batches: Sequence[torch.Tensor]) -> BlockCapture:
    """Run ``model`` on ``batches`` up to block ``layer`` and keep what that block's modules received."""
    view = anatomy(model).blocks[layer]
    cap = BlockCapture(linears=block_linears_of(view.layer))
    cap.inputs = {n: [] for n in cap.linears}
    handles = []
    for name, lin in cap.linears.items():
        def keep(mod, args, name=name):
            cap.inputs[name].append(args[0].detach().reshape(-1, args[0].shape[-1]).float())
        handles.append(lin.register_forward_pre_hook(keep))

    def call_keeper(store):
        def keep(mod, args, kwargs):
            store.append((tuple(a.detach() if torch.is_tensor(a) else a for a in args), dict(kwargs)))
        return keep

    handles.append(view.attn.register_forward_pre_hook(call_keeper(cap.attn_calls), with_kwargs=True))
    handles.append(view.mlp.register_forward_pre_hook(call_keeper(cap.mlp_calls), with_kwargs=True))

    def stop(mod, args, out):
        raise _StopForward

    handles.append(view.layer.register_forward_hook(stop))
    try:
        for ids in batches:
            try:
                model(input_ids=ids, use_cache=False)
            except _StopForward:
                pass
    finally:
        for h in handles:
            h.remove()
    return cap


def module_output(module: nn.Module, call: tuple[tuple, dict]) -> torch.Tensor:
    """Replay one captured call of ``module``; its first output (attention modules return a tuple)."""
    args, kwargs = call
    out = module(*args, **kwargs)
    return (out[0] if isinstance(out, tuple) else out).float()
