"""The two trainable interventions the benchmark defines itself (the others are geosteer's methods):

- :class:`LearnedVector`: one vector v added at every position of the residual stream after one layer,
  h ← h + s·v (a preference-trained steering vector, BiPO / RePS style: its training objective is the
  benchmark's shared preference objective, :mod:`geosteer.bench.training`);
- :class:`LoReFT`: the low-rank representation fine-tuning intervention of Wu et al. (2024),
  h ← h + s·Rᵀ(W h + b − R h) at every position after one layer, R (r × d) with orthonormal rows
  (``torch.nn.utils.parametrizations.orthogonal``), W (r × d) and b (r). It starts neutral: W = R, b = 0.

``strength`` s scales the edit; s = 0 is the stock model. Both attach through :func:`geosteer.hooks.attach_hooks`
at ``resid_post``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


class LearnedVector(nn.Module):
    """h ← h + s·v after ``layer`` (``resid_post``), every position."""

    def __init__(self, d_model: int, layer: int) -> None:
        super().__init__()
        self.layer = int(layer)
        self.vector = nn.Parameter(torch.zeros(d_model))
        self.strength = 1.0

    def edit(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.strength * self.vector.to(h)

    def attach(self, model: nn.Module) -> Callable[[], None]:
        from geosteer.hooks import attach_hooks

        return attach_hooks(model, "resid_post", [self.layer], lambda h, ctx: self.edit(h))


class LoReFT(nn.Module):
    """h ← h + s·Rᵀ(W h + b − R h) after ``layer`` (``resid_post``), every position (module docstring)."""

    def __init__(self, d_model: int, rank: int, layer: int, seed: int = 0) -> None:
        super().__init__()
        from torch.nn.utils.parametrizations import orthogonal

        if not 1 <= rank <= d_model:
            raise ValueError(f"LoReFT rank must be in 1..{d_model} (got {rank})")
        self.layer = int(layer)
        gen = torch.Generator().manual_seed(int(seed))
        self.rotate = orthogonal(nn.Linear(d_model, rank, bias=False))
        with torch.no_grad():
            q, _ = torch.linalg.qr(torch.randn(d_model, rank, generator=gen))
            self.rotate.weight = q.T.contiguous()  # orthonormal rows
        self.proj = nn.Linear(d_model, rank)
        with torch.no_grad():
            self.proj.weight.copy_(self.rotate.weight)
            self.proj.bias.zero_()
        self.strength = 1.0

    @property
    def R(self) -> torch.Tensor:
        return self.rotate.weight

    def edit(self, h: torch.Tensor) -> torch.Tensor:
        R = self.R.to(h)
        delta = self.proj(h.to(self.proj.weight.dtype)).to(h) - h @ R.T
        return h + self.strength * (delta @ R)

    def attach(self, model: nn.Module) -> Callable[[], None]:
        from geosteer.hooks import attach_hooks

        return attach_hooks(model, "resid_post", [self.layer], lambda h, ctx: self.edit(h))

    def n_parameters(self) -> int:
        """The free parameters: R (r·d), W (r·d), b (r)."""
        r, d = self.R.shape
        return 2 * r * d + r
