"""What an intervention asks a serving engine to do, layer by layer: the served-operations protocol.

An intervention that can be served (``geosteer serve``, :mod:`geosteer.serve`) implements
``served_ops(ops: ServedOps) -> None`` and declares there, per layer, what it does:

- :meth:`ServedOps.edit`: a function at a residual point of a layer (``resid_pre``, ``attn_out``,
  ``mlp_in``, ``mlp_out``, ``resid_post``: the hook points of :mod:`geosteer.hooks`), called as
  ``fn(t, state, tokens) -> t`` on the (rows, d) slice of a flat token batch that uses the recipe;
  ``state`` holds the same rows of this layer's ``resid_pre``, ``attn_out`` and ``mlp_in`` once computed,
  ``tokens`` is a :class:`Tokens` (each row's position in its sequence and its sequence's prompt length);
  an edit may also give its closed :class:`Form` (vectors, ∥/⊥ scaling, gains, replacing by the block input),
  which lets an engine run it from per-recipe tables inside a compiled graph;
- :meth:`ServedOps.attention`: an operation inside attention (:class:`Surface`, :class:`Walls`,
  :class:`ValueScale`), applied by the engine exactly, as the Hugging Face path does.

Operations on one layer run in the order they were declared, which is the order geosteer attaches the
interventions. An intervention that cannot be served exactly raises :class:`~geosteer.errors.GeosteerError`
with one line; one without ``served_ops`` is refused by the engine. Nothing here imports a serving engine.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch

from geosteer.errors import GeosteerError

POINTS = ("resid_pre", "attn_out", "mlp_in", "mlp_out", "resid_post")


class Tokens:
    """Where the rows of a flat token batch sit: position in their sequence, their sequence's prompt length.
    ``tokens[rows]`` selects rows; the selection is made when a field is first read."""

    def __init__(self, positions: torch.Tensor, prompt_len: torch.Tensor, rows: torch.Tensor | None = None) -> None:
        self._positions, self._prompt_len, self._rows = positions, prompt_len, rows

    @functools.cached_property
    def positions(self) -> torch.Tensor:
        """(n,) long."""
        return self._positions if self._rows is None else self._positions[self._rows]

    @functools.cached_property
    def prompt_len(self) -> torch.Tensor:
        """(n,) long."""
        return self._prompt_len if self._rows is None else self._prompt_len[self._rows]

    def __getitem__(self, rows: torch.Tensor) -> Tokens:
        return Tokens(self.positions, self.prompt_len, rows)

    @property
    def in_prompt(self) -> torch.Tensor:
        """(n,) bool: the row is a prompt token (what the Hugging Face path runs with an empty KV cache)."""
        return self.positions < self.prompt_len


EditFn = Callable[[torch.Tensor, dict, Tokens], torch.Tensor]

PHASES = ("all", "prompt", "generation")


@dataclass(frozen=True, eq=False)
class Form:
    """The closed form of a residual edit, which an engine can run from per-recipe tables inside a compiled
    graph (the same edit as its function, term for term). On the tensor t at the point, with x the layer's
    ``resid_pre`` and ``ref`` x or its ``mlp_in``:

    - ∥/⊥ scaling: with u = t − x if ``delta`` else t and α = ⟨u, ref⟩/⟨ref, ref⟩ (0 for a zero or absent
      reference), t + (s∥ − s⊥)·α·ref + (s⊥ − 1)·u (``scaled_delta``; a gain g is s∥ = s⊥ = g without ``ref``);
    - a vector v: t minus its component along v first when ``ablate``, then + ``scale``·v, rescaled to t's
      norm when ``norm_match`` (``vectors.apply.steer_tensor``);
    - ``replace``: t becomes x;

    on the tokens at positions ≥ ``from_token``, in ``phase`` (``prompt``: the prompt's tokens), and not at
    position 0 when ``skip_first``; the other tokens keep t."""

    s_par: float = 1.0
    s_perp: float = 1.0
    ref: str | None = None  # "resid_pre" | "mlp_in"
    delta: bool = False
    vector: torch.Tensor | None = None
    scale: float = 0.0
    ablate: bool = False
    norm_match: bool = False
    replace: bool = False
    from_token: int = 0
    phase: str = "all"
    skip_first: bool = False


class FormEdit:
    """An edit function together with its :class:`Form`; called as the function."""

    def __init__(self, fn: EditFn, form: Form) -> None:
        if form.phase not in PHASES or form.ref not in (None, "resid_pre", "mlp_in"):
            raise GeosteerError(f"a served form needs phase in {PHASES} and ref resid_pre/mlp_in (got {form})")
        self.fn, self.form = fn, form

    def __call__(self, t: torch.Tensor, state: dict, tokens: Tokens) -> torch.Tensor:
        return self.fn(t, state, tokens)


@dataclass
class Surface:
    """One layer's attention surfaces: coefficients (H, d, K, K) on a grid of ``grid_size`` cells on [lo, hi]."""

    coeff: torch.Tensor
    grid_size: int
    lo: float
    hi: float

    @property
    def K(self) -> int:  # noqa: N802 - the paper's symbol
        return self.grid_size + 3


@dataclass
class Walls:
    """One layer's exact walls (``manifold.walls.LayerWalls``), applied after that layer's surfaces
    (``coeff`` (H, d, K, K), None when the layer has none) on the grid (grid_size, lo, hi)."""

    layer_walls: Any
    coeff: torch.Tensor | None
    grid_size: int
    lo: float
    hi: float


@dataclass
class ValueScale:
    """``value_full`` ∥/⊥ scaling of each head's attention output against the token's own value."""

    s_par: float
    s_perp: float
    heads: list[int] | None
    concat: bool


@dataclass
class LayerOps:
    """What one intervention (or a whole recipe) does on one layer, in declaration order per point."""

    attention: list = field(default_factory=list)  # Surface | Walls | ValueScale (engine forms), outermost first
    resid_pre: list[EditFn] = field(default_factory=list)
    attn_out: list[EditFn] = field(default_factory=list)
    mlp_in: list[EditFn] = field(default_factory=list)
    mlp_out: list[EditFn] = field(default_factory=list)
    resid_post: list[EditFn] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.attention or any(getattr(self, p) for p in POINTS))


class ServedOps:
    """The per-layer operations being declared for one model (``n_layers`` layers, ``n_rep`` query heads per
    KV head, residual width ``d_model``). :attr:`layers` maps a layer to its :class:`LayerOps`."""

    def __init__(self, n_layers: int, n_rep: int = 1, d_model: int | None = None) -> None:
        self.n_layers, self.n_rep, self.d_model = n_layers, n_rep, d_model
        self.layers: dict[int, LayerOps] = {i: LayerOps() for i in range(n_layers)}
        self.prompt_dependent = False  # set by an operation that treats prompt and generated tokens apart

    def chosen(self, layers: Iterable[int] | None) -> list[int]:
        """``layers`` as ints (None: every layer)."""
        return list(range(self.n_layers)) if layers is None else [int(x) for x in layers]

    def edit(self, layer: int, point: str, fn: EditFn, form: Form | None = None) -> None:
        """``fn`` at ``point`` of ``layer``; ``form``: its closed form (:class:`Form`), which lets an engine run
        it inside a compiled graph (without one the engine runs the recipe eagerly)."""
        if point not in POINTS:
            raise GeosteerError(f"hook point '{point}' cannot be served; valid: {', '.join(POINTS)}")
        getattr(self._layer(layer), point).append(fn if form is None else FormEdit(fn, form))

    def attention(self, layer: int, op: Surface | Walls | ValueScale) -> None:
        self._layer(layer).attention.append(op)

    def _layer(self, layer: int) -> LayerOps:
        if int(layer) not in self.layers:
            raise GeosteerError(f"layer {layer} is out of range; this model has layers 0-{self.n_layers - 1}")
        return self.layers[int(layer)]


@runtime_checkable
class Servable(Protocol):
    def served_ops(self, ops: ServedOps) -> None: ...


def declare(intervention: Any, ops: ServedOps) -> None:
    """Add ``intervention``'s operations to ``ops``; one line if it does not declare any."""
    if not isinstance(intervention, Servable):
        raise GeosteerError(f"{type(intervention).__name__} cannot be served (it declares no served_ops); "
                            "apply it on the Hugging Face path (geosteer generate, geosteer eval)")
    intervention.served_ops(ops)
