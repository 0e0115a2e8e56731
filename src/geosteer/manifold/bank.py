"""``SurfaceBank``: the learned surfaces of one model, as an ``nn.Module`` and an intervention.

``coefficients`` (layers, heads, head_dim, K, K), rows the query axis; ``lo``/``hi`` the per-layer grid
ranges; ``walls`` exact region walls applied after the surfaces. ``attach(model) -> remove`` adds one handler
per covered layer; a model carries at most one bank (``install`` replaces it).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.nn.utils import parametrize

from geosteer.attention import attach_handlers
from geosteer.errors import GeosteerError
from geosteer.kernels import triton_low_rank
from geosteer.kernels.bspline import bspline_basis
from geosteer.kernels.exact import DEFAULT_BLOCK, backend_choice, modulated_attention, use_triton
from geosteer.kernels.feature_cache import FeatureCache, StaticFeatureCache, watch_kv_layers
from geosteer.kernels.low_rank import cached_features, low_rank_attention
from geosteer.manifold.config import ManifoldConfig
from geosteer.manifold.low_rank import factors, low_rank_bank
from geosteer.manifold.served import bank_ops
from geosteer.manifold.surface_attention import surface_attention
from geosteer.manifold.surface_checks import check_surfaces, format_layers, layers_device  # noqa: F401 - public
from geosteer.manifold.walls import Wall, bank_walled_output, compile_layer, validate_wall
from geosteer.methods import push_artifact, save_artifact
from geosteer.models.anatomy import anatomy

_BANK_ATTR = "_geosteer_surface_bank"
_ATTACHED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # banks now attached (not deep-copied)
_DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
           "bfloat16": torch.bfloat16}


class SurfaceBank(nn.Module):
    """Learned B-spline surfaces for the attention layers of one model (see the module docstring)."""

    def __init__(self, config: ManifoldConfig) -> None:
        super().__init__()
        if config.n_heads is None or config.head_dim is None:
            raise ValueError("ManifoldConfig needs the model shape (use ManifoldConfig.for_model(model))")
        self.config = config
        self.layers: list[int] = config.resolved_layers()
        ranges = config.resolved_ranges()
        K = config.K
        dtype = _DTYPES[config.dtype]
        self.coefficients = nn.Parameter(
            torch.zeros(len(self.layers), config.n_heads, config.head_dim, K, K, dtype=dtype))
        self.register_buffer("lo", torch.tensor([r[0] for r in ranges], dtype=torch.float32))
        self.register_buffer("hi", torch.tensor([r[1] for r in ranges], dtype=torch.float32))
        self.history: list[dict] = []
        self.meta: dict = {}
        self.block = DEFAULT_BLOCK
        self.backend: str | None = None  # triton | torch | cpu | None (automatic; see kernels.exact)
        self.rank: int | None = None  # set by low_rank(r) (narrow): inference takes the r + 1-slice path
        self._factors: dict = {}
        self.fused = True  # compute the stock part in the same product (False: stock SDPA + Δo)
        self.enabled = True
        self._caches: dict[int, FeatureCache] = {}
        self._static_caches: dict[int, StaticFeatureCache] = {}  # decode with a static KV cache
        self._kv_layers: dict = {}  # slot -> the KV cache layer of the forward in progress
        self._nonzero_version = None
        self._nonzero: list[bool] = []
        self.source: str | None = None
        self._views = None
        self._views_version = None
        self._last_slot = -1
        self.walls: list = []  # exact region walls (geosteer.manifold.walls.Wall), any model layer
        self._compiled_walls: dict | None = None

    # ----------------------------------------------------------------- shape / lookup
    @property
    def grid_size(self) -> int:
        return self.config.grid_size

    @property
    def K(self) -> int:
        return self.config.K

    @property
    def n_heads(self) -> int:
        return int(self.coefficients.shape[1])

    @property
    def head_dim(self) -> int:
        return int(self.coefficients.shape[2])

    def slot(self, layer: int) -> int:
        """Index into ``coefficients`` of model layer ``layer``."""
        try:
            return self.layers.index(int(layer))
        except ValueError:
            raise ValueError(f"layer {layer} has no surfaces; these surfaces cover layers "
                             f"{format_layers(self.layers)}") from None

    def range_of(self, layer: int) -> tuple[float, float]:
        i = self.slot(layer)
        return float(self.lo[i]), float(self.hi[i])

    def n_parameters(self) -> int:
        return int(self.coefficients.numel())

    def extra_repr(self) -> str:
        return (f"layers={format_layers(self.layers)}, heads={self.n_heads}, head_dim={self.head_dim}, "
                f"grid={self.grid_size}, K={self.K}, params={self.n_parameters():,}")

    @torch.no_grad()
    def surface(self, layer: int, head: int, dim: int, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """S(q, k) = b(q)ᵀ C b(k) for one surface, elementwise over broadcast ``q``/``k`` (for figures).

        Use ``torch.meshgrid`` inputs to sample a grid; values outside [lo - 3h, hi + 3h) are 0.
        """
        i = self.slot(layer)
        if not 0 <= head < self.n_heads:
            raise ValueError(f"head {head} out of range (valid 0–{self.n_heads - 1})")
        if not 0 <= dim < self.head_dim:
            raise ValueError(f"dim {dim} out of range (valid 0–{self.head_dim - 1})")
        q = torch.as_tensor(q, dtype=torch.float32)
        k = torch.as_tensor(k, dtype=torch.float32)
        q, k = torch.broadcast_tensors(q, k)
        c = self.coefficients[i, head, dim].detach().float().cpu()
        lo, hi = float(self.lo[i]), float(self.hi[i])
        bq = bspline_basis(q.cpu(), self.grid_size, lo, hi)
        bk = bspline_basis(k.cpu(), self.grid_size, lo, hi)
        return ((bq @ c) * bk).sum(-1)

    def check_model(self, model: nn.Module) -> None:
        """Raise naming the mismatch when ``model`` does not have the shapes this bank was made for."""

        an = anatomy(model)
        probs = []
        if self.config.n_layers is not None and self.config.n_layers != an.n_layers:
            probs.append(f"{self.config.n_layers} layers vs the model's {an.n_layers}")
        bad = [x for x in self.layers if not 0 <= x < an.n_layers]
        if bad and not probs:
            probs.append(f"layer {bad[0]} but the model has layers 0..{an.n_layers - 1}")
        if self.n_heads != an.n_heads:
            probs.append(f"{self.n_heads} query heads vs the model's {an.n_heads}")
        if self.head_dim != an.head_dim:
            probs.append(f"head_dim {self.head_dim} vs the model's {an.head_dim}")
        if self.config.n_kv_heads is not None and self.config.n_kv_heads != an.n_kv_heads:
            probs.append(f"{self.config.n_kv_heads} KV heads vs the model's {an.n_kv_heads}")
        if probs:
            base = self.config.base_model or "another model"
            raise GeosteerError(f"surfaces were made for {base} and do not fit this model "
                                f"({an.model_type}): " + "; ".join(probs))

    # ----------------------------------------------------------------- walls
    def set_walls(self, walls) -> None:
        """Replace the exact region walls (``Wall`` objects or their dicts), validated against the model
        shape: one-line errors for a layer/head/dim out of range or a range with lo >= hi. Takes effect on
        the next forward (also while attached)."""

        new = [w if isinstance(w, Wall) else Wall.from_dict(w) for w in walls]
        for w in new:
            validate_wall(w, n_layers=self.config.n_layers, layers=self.layers, n_heads=self.n_heads,
                          head_dim=self.head_dim)
        extra = sorted({w.layer for w in new} - set(self.layers) - set(self._wall_layers()))
        if extra and _ATTACHED.get(self):
            raise GeosteerError(f"walls on layers without surfaces ({format_layers(extra)}) must be set before "
                                "the surfaces are attached (detach, add the walls, attach again)")
        self.walls = new
        self._compiled_walls = None
        self.clear_cache()

    def add_walls(self, walls) -> None:
        """Append walls (validated; see :meth:`set_walls`)."""
        self.set_walls(list(self.walls) + list(walls))

    def _wall_layers(self) -> list[int]:
        return sorted({w.layer for w in self.walls})

    def walls_for(self, layer: int):
        """The compiled walls of ``layer`` (``walls.LayerWalls``) or None."""

        if self._compiled_walls is None:
            by: dict[int, list] = {}
            for w in self.walls:
                by.setdefault(w.layer, []).append(w)
            self._compiled_walls = {x: compile_layer(ws, self.n_heads, self.head_dim) for x, ws in by.items()}
        return self._compiled_walls.get(int(layer))

    # ----------------------------------------------------------------- intervention protocol
    def attach(self, model: nn.Module) -> Callable[[], None]:
        """Add one attention handler per covered layer; returns ``remove``. Refuses a second bank."""

        current = getattr(model, _BANK_ATTR, None)
        if current is not None:
            other = current[0]
            what = "these surfaces are" if other is self else "surfaces are"
            raise GeosteerError(f"{what} already attached to this model; remove them first "
                                "(geosteer.manifold.uninstall(model), or leave the steer() block)")
        self.check_model(model)
        dev = layers_device(anatomy(model), self.layers)
        if dev is not None and self.coefficients.device != dev:
            self.to(dev)  # one device for all covered layers: move once (else per layer, per forward)
        covered = sorted(set(self.layers) | set(self._wall_layers()))  # walls also on layers without surfaces

        def make(layer: int):
            return self._make_handler(self.slot(layer) if layer in self.layers else None, layer)

        detach_handlers = attach_handlers(model, covered, make)
        an = anatomy(model)
        unwatch = watch_kv_layers({self.slot(x): an.blocks[x].attn for x in self.layers}, self._kv_layers)
        self.clear_cache()
        _ATTACHED[self] = True

        def remove() -> None:
            unwatch()
            detach_handlers()
            _ATTACHED.pop(self, None)
            if getattr(model, _BANK_ATTR, None) is not None and model.__dict__.get(_BANK_ATTR)[0] is self:
                delattr(model, _BANK_ATTR)
            self.clear_cache()

        model.__dict__[_BANK_ATTR] = (self, remove)
        return remove

    def save(self, folder: str | Path, **meta) -> Path:
        """Write this bank as a surfaces artifact folder (``geosteer.manifold.save``: ``dtype=``, and ``meta``
        recorded in the config). ``geosteer.load(folder, model=...)`` reads it back."""

        return save_artifact(self, folder, **meta)

    def push_to_hub(self, repo_id: str, *, private: bool = True, token: str | None = None,
                    revision: str | None = None, commit_message: str | None = None, **meta) -> str:
        """Upload this bank (saved with its model card) to the Hub repo ``repo_id``; return the repo URL.
        Load it back with ``geosteer.load(repo_id)``. Figures of a surface: ``geosteer.viz.surfaces``."""

        return push_artifact(self, repo_id, private=private, token=token, revision=revision,
                             commit_message=commit_message or "Upload geosteer attention-manifold surfaces", **meta)

    def low_rank(self, rank: int, narrow: bool = True) -> SurfaceBank:
        """A copy with each C_d truncated to its ``rank`` largest singular values (``meta["low_rank"]``: the
        discarded energy per layer). ``narrow`` (default): inference runs the r + 1-slice path (also on the
        Triton backend); ``narrow=False``: the exact kernels on the truncated coefficients everywhere; see
        :mod:`geosteer.manifold.low_rank`."""

        return low_rank_bank(self, rank, narrow)

    def _low_rank_attention(self, slot: int, c: torch.Tensor):
        """modulated_attention's signature on the rank-r path (factors of this layer cached per version;
        decoding reuses the narrow key features of the past keys, in ``_caches`` under ``("low_rank", slot)``).
        Where the fused Triton kernels apply, the rank-r Triton forward runs (no feature cache; with autograd,
        the exact fused kernels on the truncated coefficients)."""

        key = (slot, self.rank, self.coefficients._version, c.device)
        uw = self._factors.get(key)
        if uw is None:
            self._factors = {k: f for k, f in self._factors.items() if k[0] != slot}
            uw = self._factors[key] = factors(c, self.rank)

        def attend(q, k, v, _c, grid_size, lo, hi, *, dropout, features, backend, block, **kw):
            if use_triton(backend, q, lo, hi, dropout):
                if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, _c)):
                    return modulated_attention(q, k, v, _c, grid_size, lo, hi, dropout=dropout, backend=backend,
                                               **kw)
                return triton_low_rank.low_rank_attention_triton(q, k, v, *uw, grid_size, lo, hi, **kw)
            compiled = backend != "torch"
            cache = self._caches.setdefault(("low_rank", slot), FeatureCache())
            features = cached_features(cache, q, k, v, uw[1], grid_size, lo, hi, key, compiled=compiled, **kw)
            return low_rank_attention(q, k, v, *uw, grid_size, lo, hi, features=features, compiled=compiled,
                                      block=block, **kw)

        return attend

    def clear_cache(self) -> None:
        """Drop the decode feature caches (they are rebuilt on the next decoding step)."""
        self._caches.clear()
        self._static_caches.clear()
        self._views = None
        self._last_slot = -1

    def served_ops(self, ops) -> None:
        """Its surfaces and exact walls for a serving engine (``geosteer.served``)."""

        bank_ops(self, ops)

    # ----------------------------------------------------------------- the handler
    def layer_nonzero(self, slot: int) -> bool:
        """Whether slot ``slot`` has a non-zero surface (an all-zero one is the stock layer)."""
        c = self.coefficients
        if parametrize.is_parametrized(self, "coefficients"):  # factors (rank-r training): a new tensor
            return bool(c[slot].ne(0).any())                    # on every access, nothing to cache on
        key = (c._version, c.data_ptr())
        if self._nonzero_version != key:
            with torch.no_grad():
                self._nonzero = (c.detach().reshape(c.shape[0], -1) != 0).any(dim=1).tolist()
            self._nonzero_version = key
        return self._nonzero[slot]

    def _layer_coeff(self, slot: int, grad: bool) -> torch.Tensor:
        """This layer's (heads, head_dim, K, K) coefficients. With autograd, all layers' views come from one
        ``unbind`` per forward (one gradient buffer instead of a full-size zero buffer per layer); a forward
        is recognised by the layers being visited in increasing order."""
        coeff = self.coefficients
        if not grad:
            return coeff[slot]
        if self._views is None or slot <= self._last_slot or self._views_version != coeff._version:
            self._views = coeff.unbind(0)
            self._views_version = coeff._version
        self._last_slot = slot
        return self._views[slot]

    def _attend(self, call, proceed, slot: int, handler):
        return surface_attention(self, call, proceed, slot, handler)

    def _make_handler(self, slot: int | None, layer: int):
        def handler(call, proceed):
            lw = self.walls_for(layer) if self.walls else None
            if slot is None:
                if not self.enabled or lw is None:
                    return proceed(call)
                return self._walled(call, proceed(call)[0], None, lw, None), None
            if lw is None or not self.enabled:
                return self._attend(call, proceed, slot, handler)
            # walls: the unwalled output (also the compiled path), then the walled pairs recomputed
            out, w = self._attend(call, proceed, slot, handler)
            return self._walled(call, out, slot, lw, handler), w

        return handler

    def _walled(self, call, out, slot, lw, handler):

        return bank_walled_output(self, call, out, slot, lw)



def attached_bank(model: nn.Module) -> SurfaceBank | None:
    """The bank currently on ``model`` (installed persistently or attached inside ``steer``), if any."""
    cur = model.__dict__.get(_BANK_ATTR)
    return cur[0] if cur is not None else None


def install(model: nn.Module, grid_size: int = 8, grid_range=(-4.0, 4.0), layers=None, *, ranges=None,
            bank: SurfaceBank | None = None, dtype: str = "float32", backend: str | None = None) -> SurfaceBank:
    """Install surfaces on ``model`` until ``uninstall(model)`` and return the bank (zero coefficients = stock).

    ``bank``: an existing bank to install; one already installed is uninstalled first. ``backend``:
    ``triton``, ``torch``, ``cpu`` or ``auto`` (None: ``GEOSTEER_MANIFOLD_BACKEND``, else automatic).
    """
    if bank is None:
        cfg = ManifoldConfig.for_model(model, grid_size=grid_size, grid_range=grid_range, layers=layers,
                                       ranges=ranges, dtype=dtype)
        bank = SurfaceBank(cfg)
    else:
        bank.check_model(model)
    backend_choice(backend)  # refuse an unknown name (or environment value) before anything changes
    bank.backend = backend if backend is not None else bank.backend
    uninstall(model)
    bank.attach(model)
    return bank


def uninstall(model: nn.Module) -> SurfaceBank | None:
    """Remove the bank on ``model`` (if any) and return it; the model is the stock model again."""
    cur = model.__dict__.get(_BANK_ATTR)
    if cur is None:
        return None
    bank, remove = cur
    remove()
    return bank
