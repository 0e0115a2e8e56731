"""LoReFT as an intervention: low-rank representation fine-tuning (Wu et al., 2024).

At every position of the residual stream after each chosen layer (``resid_post``)

    h ← h + s·Rᵀ(W h + b − R h)

with R (r × d) of orthonormal rows, W (r × d), b (r) per layer; ``strength`` s scales the learned edit
(s = 0: the stock model; s = 1: as trained). It starts neutral with W = R and b = 0 (the edit is zero whatever R
is). While trained, R is kept orthonormal by :func:`torch.nn.utils.parametrizations.orthogonal`
(:meth:`LoReFT.trainable`); saved and loaded, it is a plain tensor checked to be orthonormal.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import nn
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import orthogonal

from geosteer.errors import ArtifactError, GeosteerError
from geosteer.hooks import attach_hooks
from geosteer.methods import save_artifact
from geosteer.models.anatomy import anatomy
from geosteer.models.loading import model_id

POINT = "resid_post"


def loreft_delta(h: torch.Tensor, R: torch.Tensor, W: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Rᵀ(W h + b − R h) for every row of ``h`` (…, d), computed in float32 at least; in ``h``'s dtype."""
    dt = torch.promote_types(h.dtype, torch.float32)
    x = h.to(dt)
    R, W, b = R.to(device=h.device, dtype=dt), W.to(device=h.device, dtype=dt), b.to(device=h.device, dtype=dt)
    return ((x @ W.T + b - x @ R.T) @ R).to(h.dtype)


def orthonormal_rows(d_model: int, rank: int, generator: torch.Generator) -> torch.Tensor:
    """A random (rank × d_model) matrix with orthonormal rows."""
    q, _ = torch.linalg.qr(torch.randn(d_model, rank, generator=generator, dtype=torch.float64))
    return q.T.contiguous().float()


class LoReFT(nn.Module):
    """LoReFT after each of ``layers`` (``resid_post``, every position): see the module docstring.

    ``R``, ``W``: (len(layers), rank, d_model); ``b``: (len(layers), rank). ``with_(strength=s)`` gives a
    copy at another strength sharing the tensors; ``save(folder)`` writes the ``geosteer-loreft`` artifact."""

    def __init__(self, layers: Sequence[int], R: torch.Tensor, W: torch.Tensor, b: torch.Tensor, *,
                 strength: float = 1.0, base_model: str | None = None, meta: dict | None = None) -> None:
        super().__init__()
        self.layers = [int(i) for i in layers]
        if not self.layers or len(set(self.layers)) != len(self.layers):
            raise GeosteerError(f"LoReFT needs one or more distinct layers (got {self.layers})")
        n = len(self.layers)
        if R.dim() != 3 or R.shape[0] != n or not 1 <= R.shape[1] <= R.shape[2]:
            raise GeosteerError(f"LoReFT's R must be ({n}, rank, d_model) with 1 <= rank <= d_model "
                                f"(got {tuple(R.shape)})")
        if W.shape != R.shape or b.shape != R.shape[:2]:
            raise GeosteerError(f"LoReFT's W must be {tuple(R.shape)} and b {tuple(R.shape[:2])} "
                                f"(got {tuple(W.shape)}, {tuple(b.shape)})")
        for name, t in (("R", R), ("W", W), ("b", b)):
            if not t.is_floating_point() or not bool(torch.isfinite(t).all()):
                raise GeosteerError(f"LoReFT's {name} must hold finite floats")
        self.R = nn.Parameter(R.detach().float(), requires_grad=False)
        self.W = nn.Parameter(W.detach().float(), requires_grad=False)
        self.b = nn.Parameter(b.detach().float(), requires_grad=False)
        self.strength = float(strength)
        self.base_model, self.meta = base_model, dict(meta or {})
        self._row = {layer: i for i, layer in enumerate(self.layers)}

    @classmethod
    def neutral(cls, d_model: int, rank: int, layers: Sequence[int], *, seed: int = 0,
                base_model: str | None = None) -> LoReFT:
        """A random orthonormal R per layer, W = R, b = 0: the stock model until trained."""
        if not 1 <= int(rank) <= int(d_model):
            raise GeosteerError(f"the LoReFT rank must be in 1..{d_model} (got {rank})")
        g = torch.Generator().manual_seed(int(seed))
        R = torch.stack([orthonormal_rows(int(d_model), int(rank), g) for _ in layers])
        return cls(layers, R, R.clone(), torch.zeros(R.shape[:2]), base_model=base_model)

    @classmethod
    def for_model(cls, model: nn.Module, rank: int, layers: Sequence[int] | None = None, *,
                  seed: int = 0) -> LoReFT:
        """:meth:`neutral` for ``model`` (``layers`` None: every layer), recording its model id."""
        an = anatomy(model)
        return cls.neutral(an.d_model, rank, an.check_layers(layers), seed=seed, base_model=model_id(model))

    @property
    def rank(self) -> int:
        return int(self.R.shape[1])

    @property
    def d_model(self) -> int:
        return int(self.R.shape[2])

    def n_parameters(self) -> int:
        """The free numbers: R (r·d), W (r·d) and b (r) per layer."""
        n, r, d = self.R.shape
        return n * (2 * r * d + r)

    def __repr__(self) -> str:
        return f"LoReFT(layers={self.layers}, rank={self.rank}, strength={self.strength:g})"

    def with_(self, *, strength: float) -> LoReFT:
        """A copy at strength ``strength`` (the tensors shared)."""
        out = copy.copy(self)
        out.strength = float(strength)
        return out

    def delta(self, h: torch.Tensor, layer: int) -> torch.Tensor:
        """The unscaled edit Rᵀ(W h + b − R h) of ``layer`` on ``h`` (…, d)."""
        i = self._row[int(layer)]
        R = self._R if getattr(self, "_R", None) is not None else self.R
        return loreft_delta(h, R[i], self.W[i], self.b[i])

    def _forget_R(self, *_) -> None:  # noqa: N802 - the paper's symbol
        self._R = None

    def edit(self, h: torch.Tensor, layer: int) -> torch.Tensor:
        return h + self.strength * self.delta(h, layer)

    def check_model(self, model: nn.Module) -> None:
        an = anatomy(model)
        if an.d_model != self.d_model:
            raise ArtifactError(f"LoReFT of width {self.d_model} does not fit this model (d_model {an.d_model})")
        an.check_layers(self.layers)

    def attach(self, model: nn.Module) -> Callable[[], None]:
        if self.strength == 0:
            return lambda: None  # the stock model
        self.check_model(model)
        if not parametrize.is_parametrized(self, "R"):
            return attach_hooks(model, POINT, self.layers, lambda h, ctx: self.edit(h, ctx.layer))
        # trained: the orthogonal map of R computed once per forward, not once per layer
        def remember(module, args) -> None:
            self._R = self.R

        handles = [model.register_forward_pre_hook(remember), model.register_forward_hook(self._forget_R)]
        remove = attach_hooks(model, POINT, self.layers, lambda h, ctx: self.edit(h, ctx.layer))

        def detach() -> None:
            remove()
            for handle in handles:
                handle.remove()
            self._R = None
        return detach

    def served_ops(self, ops) -> None:
        """The same edit on each served layer (``geosteer.served``), every token; no closed :class:`Form`
        holds a low-rank projection, so an engine runs it eagerly."""
        if self.strength == 0:
            return
        if ops.d_model is not None and ops.d_model != self.d_model:
            raise ArtifactError(f"LoReFT of width {self.d_model} does not fit this model (d_model {ops.d_model})")
        for layer in self.layers:
            ops.edit(layer, POINT, lambda t, st, tokens, layer=layer: self.edit(t, layer))

    # -- training -------------------------------------------------------------------------------------------
    def trainable(self, seed: int = 0) -> LoReFT:
        """R, W and b trainable, R kept orthonormal (an orthogonal parametrization); :meth:`freeze` ends it.

        The parametrization completes R's rows to a full orthogonal basis at random; ``seed`` fixes that
        completion (so that a resumed run continues the same one) without touching the global random state."""
        if not parametrize.is_parametrized(self, "R"):
            start = self.R.detach().clone()
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(int(seed))
                orthogonal(self, "R")
                with torch.no_grad():
                    self.R = start  # the parametrization's right inverse: R as it was
        self.requires_grad_(True)
        return self

    def freeze(self) -> LoReFT:
        """R a plain tensor again (its trained value); nothing trainable."""
        if parametrize.is_parametrized(self, "R"):
            parametrize.remove_parametrizations(self, "R", leave_parametrized=True)
        self.requires_grad_(False)
        return self

    # -- the artifact (geosteer.loreft.artifact, through the registry) --------------------------------------
    def save(self, folder: str | Path, *, overwrite: bool = True, command: str | None = None) -> Path:
        return save_artifact(self, folder, overwrite=overwrite, command=command)
