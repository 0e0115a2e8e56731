"""Branch-level hook points per layer ℓ with TransformerLens' names, on every family (tensors (b, seq, d)).

``resid_pre`` (block input x), ``attn_out`` (attention update A), ``mlp_in`` (the MLP branch's input before
its norm; ``resid_mid`` is accepted), ``mlp_normed`` (after it), ``mlp_out`` (MLP update Φ), ``resid_post``.
A hook is ``fn(tensor, ctx) -> tensor | None``; ``ctx.state`` holds this forward's ``resid_pre``,
``attn_out`` and ``mlp_in`` of the layer. :func:`attach_hooks` registers one ``fn`` on many layers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from geosteer.models.anatomy import anatomy, first_tensor, replace_first

HOOK_POINTS = ("resid_pre", "attn_out", "mlp_in", "mlp_normed", "mlp_out", "resid_post")
POINT_SYNONYMS = {"resid_mid": "mlp_in"}  # TransformerLens' name -> ours (accepted silently)


def canonical_point(point: str) -> str:
    """``point`` with TransformerLens' synonyms mapped to ours; unknown names refused."""
    point = POINT_SYNONYMS.get(point, point)
    if point not in HOOK_POINTS:
        raise ValueError(f"unknown hook point '{point}'; valid: {', '.join(HOOK_POINTS)}")
    return point


@dataclass
class HookContext:
    layer: int
    point: str
    state: dict = field(default_factory=dict)


HookFn = Callable[[torch.Tensor, HookContext], torch.Tensor | None]


def _layer_state(block_layer: nn.Module) -> dict:
    st = getattr(block_layer, "_geosteer_state", None)
    if st is None:
        st = {}
        block_layer._geosteer_state = st
    return st


def _hidden_from_args(args, kwargs):
    if args:
        return args[0], True
    return kwargs["hidden_states"], False


class HookSet:
    """A set of registered hooks that are removed together (always, via ``remove()``)."""

    def __init__(self) -> None:
        self._handles: list = []

    def add_handle(self, h) -> None:
        self._handles.append(h)

    def remove(self) -> None:
        while self._handles:
            h = self._handles.pop()
            h() if callable(h) and not hasattr(h, "remove") else h.remove()


def add_hook(model: nn.Module, point: str, layer: int, fn: HookFn, hooks: HookSet) -> None:
    """Register ``fn`` at ``point`` of ``layer``; its handles go into ``hooks``."""
    an = anatomy(model)
    point = canonical_point(point)
    an.check_layers([layer])
    block = an.blocks[layer]
    state = _layer_state(block.layer)
    _ensure_state_tracking(model, layer, hooks)

    def ctx() -> HookContext:
        return HookContext(layer, point, state)

    if point == "resid_pre":
        def pre(mod, args, kwargs):
            x, positional = _hidden_from_args(args, kwargs)
            y = fn(x, ctx())
            if y is None:
                return None
            state["resid_pre"] = y
            if positional:
                return (y, *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": y}

        hooks.add_handle(block.layer.register_forward_pre_hook(pre, with_kwargs=True, prepend=False))
    elif point in ("attn_out", "mlp_out", "resid_post"):
        mod = {"attn_out": block.attn_update, "mlp_out": block.mlp_update, "resid_post": block.layer}[point]

        def post(mod, args, out):
            y = fn(first_tensor(out), ctx())
            if y is None:
                return None
            if point != "resid_post":
                state[point] = y
            return replace_first(out, y)

        hooks.add_handle(mod.register_forward_hook(post))
    elif point in ("mlp_in", "mlp_normed"):
        mod = block.mlp_norm if point == "mlp_in" else block.mlp

        def pre_in(mod, args, kwargs):
            x, positional = _hidden_from_args(args, kwargs) if args or "hidden_states" in kwargs else (
                next(iter(kwargs.values())), False)
            y = fn(x, ctx())
            if y is None:
                return None
            if point == "mlp_in":
                state["mlp_in"] = y
            if positional:
                return (y, *args[1:]), kwargs
            key = "hidden_states" if "hidden_states" in kwargs else next(iter(kwargs))
            return args, {**kwargs, key: y}

        hooks.add_handle(mod.register_forward_pre_hook(pre_in, with_kwargs=True))


def attach_hooks(model: nn.Module, point: str, layers: Sequence[int] | None, fn: HookFn) -> Callable[[], None]:
    """Register ``fn`` at ``point`` on each of ``layers`` (None = all); return the remover.

    The one loop every hook-based intervention uses: layers are checked first (one-line error), and if a
    registration fails half-way the hooks already added are removed before the error propagates.
    ``fn`` sees the layer as ``ctx.layer``.
    """
    point = canonical_point(point)
    chosen = anatomy(model).check_layers(layers)
    hooks = HookSet()
    try:
        for layer in chosen:
            add_hook(model, point, layer, fn, hooks)
    except Exception:
        hooks.remove()
        raise
    return hooks.remove


def _ensure_state_tracking(model: nn.Module, layer: int, hooks: HookSet) -> None:
    """Keep ``state`` filled with the current forward's resid_pre / attn_out / mlp_in for ``layer``.

    Registered first (``prepend=True``) so user hooks at the same module see fresh state. Reference
    counted: the trackers go away with the last HookSet that needed them.
    """
    an = anatomy(model)
    block = an.blocks[layer]
    state = _layer_state(block.layer)
    count = getattr(block.layer, "_geosteer_track_count", 0)
    block.layer._geosteer_track_count = count + 1
    if count == 0:
        def track_pre(mod, args, kwargs):
            # Only the running layer keeps tensors: earlier layers' state is dropped here, so memory
            # does not grow with the number of layers hooked.
            for other in an.blocks:
                st = getattr(other.layer, "_geosteer_state", None)
                if st and st is not state:
                    st.clear()
            state.clear()
            state["resid_pre"] = _hidden_from_args(args, kwargs)[0]

        def track_attn(mod, args, out):
            state["attn_out"] = first_tensor(out)

        def track_mlp_norm(mod, args, kwargs):
            state["mlp_in"] = args[0] if args else next(iter(kwargs.values()))

        handles = [
            block.layer.register_forward_pre_hook(track_pre, with_kwargs=True, prepend=True),
            block.attn_update.register_forward_hook(track_attn, prepend=True),
            block.mlp_norm.register_forward_pre_hook(track_mlp_norm, with_kwargs=True, prepend=True),
        ]
        block.layer._geosteer_track_handles = handles

    def release() -> None:
        n = block.layer._geosteer_track_count - 1
        block.layer._geosteer_track_count = n
        if n == 0:
            for h in block.layer._geosteer_track_handles:
                h.remove()
            block.layer._geosteer_track_handles = []
            state.clear()

    hooks.add_handle(release)
