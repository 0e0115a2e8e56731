"""What one decoder block sees on calibration text: its linears' inputs and its attention / MLP calls.

``capture_block(model, layer, batches)`` runs ``model`` on each batch up to the end of block ``layer`` (the
rest of the forward is skipped) and keeps, per calibration batch, the input rows of every ``nn.Linear``
of that block and the positional and keyword arguments of its attention and MLP modules, so a quantiser
can replay those modules with candidate weights. ``capture_blocks(model, batches)`` gives every block's
capture in order at the cost of about three forwards in all, as the reference AWQ and GPTQ code does: block
0's inputs are kept once, and each block's outputs on its kept inputs become the next block's inputs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
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


def _hook_block(view, cap: BlockCapture) -> list:
    """Forward pre-hooks keeping what ``view``'s linears, attention and MLP receive in ``cap``; their handles."""
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
    return handles


@torch.no_grad()
def capture_block(model: nn.Module, layer: int, batches: Sequence[torch.Tensor]) -> BlockCapture:
    """Run ``model`` on ``batches`` up to block ``layer`` and keep what that block's modules received."""
    view = anatomy(model).blocks[layer]
    cap = BlockCapture(linears=block_linears_of(view.layer))
    handles = _hook_block(view, cap)

    def stop(mod, args, out):
        raise _StopForward

    handles.append(view.layer.register_forward_hook(stop))
    _forward_until_stop(model, batches, handles)
    return cap


def _forward_until_stop(model: nn.Module, batches: Sequence[torch.Tensor], handles: list) -> None:
    """Run each batch until a hook raises ``_StopForward``; remove the hooks' ``handles`` afterwards."""
    try:
        for ids in batches:
            try:
                model(input_ids=ids, use_cache=False)
            except _StopForward:
                pass
    finally:
        for h in handles:
            h.remove()


@dataclass
class _LayerCall:
    """One block's call on one batch, less its hidden states: the positional arguments after them, the keywords."""

    rest: tuple
    kwargs: dict
    by_keyword: bool  # the hidden states came as ``hidden_states=``

    def run(self, layer: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
        """The block's output hidden states on ``hidden``."""
        if self.by_keyword:
            out = layer(*self.rest, **{**self.kwargs, "hidden_states": hidden})
        else:
            out = layer(hidden, *self.rest, **self.kwargs)
        return out[0] if isinstance(out, tuple) else out


@torch.no_grad()
def layer_calls(model: nn.Module, batches: Sequence[torch.Tensor]) -> tuple[list[torch.Tensor], list[list[_LayerCall]]]:
    """One forward per batch up to the last block: block 0's input hidden states per batch, and every block's
    call (masks, positions, rotary tables: all but the hidden states) per block and batch."""
    layers = [b.layer for b in anatomy(model).blocks]
    first: list[torch.Tensor] = []
    calls: list[list[_LayerCall]] = [[] for _ in layers]

    def keeper(i: int):
        def keep(mod, args, kwargs):
            by_kw = not args
            hidden = kwargs["hidden_states"] if by_kw else args[0]
            kw = {k: v for k, v in kwargs.items() if k != "hidden_states"}
            calls[i].append(_LayerCall(tuple(args[1:]), kw, by_kw))
            if i == 0:
                first.append(hidden.detach())
            if i == len(layers) - 1:
                raise _StopForward
        return keep

    handles = [lay.register_forward_pre_hook(keeper(i), with_kwargs=True) for i, lay in enumerate(layers)]
    _forward_until_stop(model, batches, handles)
    return first, calls


@torch.no_grad()
def capture_blocks(model: nn.Module, batches: Sequence[torch.Tensor]) -> Iterator[tuple[int, BlockCapture]]:
    """``(layer, capture)`` for every block in order, as ``capture_block(model, layer, batches)`` gives them, from
    one forward and one pass of each block over its kept inputs (``capture_block`` per layer re-runs every block
    below). Each block's outputs, the next block's inputs, are computed when the iterator resumes, from the
    block as the caller left it: a quantiser that changes a block's weights feeds the changed block's outputs
    up, as a fresh forward would."""
    hidden, calls = layer_calls(model, batches)
    for layer, view in enumerate(anatomy(model).blocks):
        cap = BlockCapture(linears=block_linears_of(view.layer))
        handles = _hook_block(view, cap)
        try:
            for h, call in zip(hidden, calls[layer], strict=True):
                call.run(view.layer, h)
        finally:
            for handle in handles:
                handle.remove()
        yield layer, cap
        if layer + 1 < len(calls):
            hidden = [call.run(view.layer, h) for h, call in zip(hidden, calls[layer], strict=True)]


def block_captures(model: nn.Module, batches: Sequence[torch.Tensor],
                   cached: bool = True) -> Iterator[tuple[int, BlockCapture]]:
    """``capture_blocks`` (``cached``) or ``capture_block`` layer by layer: the same captures, the second at
    the cost of a forward up to each block."""
    if cached:
        yield from capture_blocks(model, batches)
        return
    for layer in range(anatomy(model).n_layers):
        yield layer, capture_block(model, layer, batches)


def module_output(module: nn.Module, call: tuple[tuple, dict]) -> torch.Tensor:
    """Replay one captured call of ``module``; its first output (attention modules return a tuple)."""
    args, kwargs = call
    out = module(*args, **kwargs)
    return (out[0] if isinstance(out, tuple) else out).float()
