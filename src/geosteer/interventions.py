"""Interventions: a small protocol, composition, and clean removal.

An intervention is any object with ``attach(model) -> remove``. ``steer(model, a, b, ...)`` attaches them
in order and removes them in reverse, also on error; they act inside the forward, so ``generate`` works.

    with geosteer.steer(model, ScaleHook("attn_out", 0.5, layers=[3])):
        model.generate(...)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
from torch import nn

from geosteer.attention import use_geosteer_attention
from geosteer.hooks import HookFn, attach_hooks


@runtime_checkable
class Intervention(Protocol):
    def attach(self, model: nn.Module) -> Callable[[], None]: ...


@contextmanager
def steer(model: nn.Module, *interventions: Intervention) -> Iterator[nn.Module]:
    """Attach ``interventions`` for the duration of the block; remove them on exit (also on error)."""
    use_geosteer_attention(model)
    removers: list[Callable[[], None]] = []
    try:
        for iv in interventions:
            if not isinstance(iv, Intervention):
                raise TypeError(f"{iv!r} is not an intervention (needs attach(model) -> remove)")
            removers.append(iv.attach(model))
        yield model
    finally:
        for r in reversed(removers):
            r()


@dataclass
class HookIntervention:
    """A plain function at a hook point on some layers (``None`` = all). The generic building block."""

    point: str
    fn: HookFn
    layers: Sequence[int] | None = None

    def attach(self, model: nn.Module) -> Callable[[], None]:
        return attach_hooks(model, self.point, self.layers, self.fn)


class Identity(HookIntervention):
    """A no-op branch intervention (returns the tensor unchanged): used to prove neutrality."""

    def __init__(self, point: str = "attn_out", layers: Sequence[int] | None = None) -> None:
        super().__init__(point, lambda x, ctx: x.clone(), layers)


class ScaleHook(HookIntervention):
    """Multiply the tensor at ``point`` by ``factor`` (e.g. an attention gain β_A on ``attn_out``)."""

    def __init__(self, point: str, factor: float, layers: Sequence[int] | None = None) -> None:
        super().__init__(point, lambda x, ctx: x * factor, layers)
        self.factor = factor


class AddVector(HookIntervention):
    """Add a steering vector (d_model,) at ``point`` on every token."""

    def __init__(self, point: str, vector: torch.Tensor, layers: Sequence[int] | None = None) -> None:
        super().__init__(point, lambda x, ctx: x + vector.to(device=x.device, dtype=x.dtype), layers)
        self.vector = vector
