"""Read-only recorders: residual-stream points and post-RoPE q/k/v, as interventions.

``Recorder`` stores detached copies per (point, layer), one entry per forward call (so generation with a
KV cache yields one entry per step). ``AttentionRecorder`` stores q, k, v as the attention function saw
them (post-RoPE, before GQA expansion). Neither changes any tensor.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

import torch
from torch import nn

from geosteer.attention import attach_handlers
from geosteer.hooks import HookSet, attach_hooks


class Recorder:
    """Record the tensors at ``points`` on ``layers`` (None = all). ``recorder[point, layer]`` → list."""

    def __init__(self, points: Sequence[str] = ("resid_pre",), layers: Sequence[int] | None = None,
                 to_cpu: bool = True) -> None:
        self.points = tuple(points)
        self.layers = layers
        self.to_cpu = to_cpu
        self.records: dict[tuple[str, int], list[torch.Tensor]] = defaultdict(list)

    def __getitem__(self, key: tuple[str, int]) -> list[torch.Tensor]:
        return self.records[key]

    def stacked(self, point: str) -> torch.Tensor:
        """(layers, batch, seq, d) for the first call at ``point``."""
        keys = sorted(k for k in self.records if k[0] == point)
        return torch.stack([self.records[k][0] for k in keys])

    def clear(self) -> None:
        self.records.clear()

    def attach(self, model: nn.Module) -> Callable[[], None]:
        def make(point: str):  # keyed by the name asked for (a synonym keeps its name)
            def fn(x, ctx):
                t = x.detach()
                self.records[(point, ctx.layer)].append(t.cpu() if self.to_cpu else t.clone())
                return None

            return fn

        hooks = HookSet()
        try:
            for point in self.points:
                hooks.add_handle(attach_hooks(model, point, self.layers, make(point)))
        except Exception:
            hooks.remove()
            raise
        return hooks.remove


class AttentionRecorder:
    """Record post-RoPE ``query``/``key``/``value`` per layer, one entry per forward call."""

    def __init__(self, layers: Sequence[int] | None = None, what: Sequence[str] = ("query", "key", "value")):
        self.layers = layers
        self.what = tuple(what)
        self.records: dict[tuple[str, int], list[torch.Tensor]] = defaultdict(list)

    def __getitem__(self, key: tuple[str, int]) -> list[torch.Tensor]:
        return self.records[key]

    def attach(self, model: nn.Module) -> Callable[[], None]:
        def make(layer: int):
            def handler(call, proceed):
                for name in self.what:
                    self.records[(name, layer)].append(getattr(call, name).detach().cpu())
                return proceed(call)

            return handler

        return attach_handlers(model, self.layers, make)
