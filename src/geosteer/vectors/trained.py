"""Steering vectors learned by gradient descent (a preference-trained vector, BiPO / RePS style).

:class:`TrainableVectors` adds one trainable vector per layer at a hook point, every position, h ← h + v_ℓ
(zero at the start: the stock model). Any objective trains it (e.g. :class:`geosteer.train.PromptObjective`
through :func:`geosteer.train.fit`); :meth:`TrainableVectors.to_vectors` then gives ordinary
:class:`~geosteer.vectors.SteeringVectors` (mode ``add``), which save, load and serve as any vectors, with one
strength: their ``scale`` (0: the stock model, 1: as trained).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from geosteer.hooks import attach_hooks
from geosteer.models.anatomy import anatomy
from geosteer.vectors.apply import SteeringVectors
from geosteer.vectors.config import check_point


class TrainableVectors(nn.Module):
    """One trainable vector per layer of ``layers``, added at ``point`` at every position (``vectors``:
    (len(layers), d_model), zero at the start)."""

    def __init__(self, d_model: int, layers: Sequence[int], point: str = "resid_post") -> None:
        super().__init__()
        check_point(point)
        self.layers, self.point = [int(i) for i in layers], point
        self.vectors = nn.Parameter(torch.zeros(len(self.layers), int(d_model)))
        self._row = {layer: i for i, layer in enumerate(self.layers)}

    @classmethod
    def for_model(cls, model: nn.Module, layers: Sequence[int], point: str = "resid_post") -> TrainableVectors:
        an = anatomy(model)
        return cls(an.d_model, an.check_layers(layers), point)

    def attach(self, model: nn.Module) -> Callable[[], None]:
        return attach_hooks(model, self.point, self.layers,
                            lambda h, ctx: h + self.vectors[self._row[ctx.layer]].to(h))

    def to_vectors(self, model: nn.Module, extraction: dict | None = None) -> SteeringVectors:
        """The trained vectors as :class:`SteeringVectors` for ``model`` (mode ``add``, scale 1: the same edit);
        ``extraction``: how they were trained (recorded in the artifact)."""
        from geosteer.models.loading import model_id

        an = anatomy(model)
        vectors = {layer: self.vectors[i].detach().float().clone() for i, layer in enumerate(self.layers)}
        return SteeringVectors(vectors, point=self.point, base_model=model_id(model),
                               model_type=str(getattr(model.config, "model_type", "") or ""), d_model=an.d_model,
                               n_layers=an.n_layers, extraction={"method": "trained", **(extraction or {})})
