"""The served-operations protocol: what an intervention asks a serving engine to do, layer by layer.

A servable intervention implements ``served_ops(ops: ServedOps)``: :meth:`ServedOps.edit` for a function at
a residual hook point (``fn(t, state, tokens) -> t`` on the recipe's rows, optionally with its closed
:class:`Form` for compiled graphs) and :meth:`ServedOps.attention` for an operation inside attention
(:class:`Surface`, :class:`Walls`, :class:`ValueScale`). Operations run in declaration order; one that cannot
be served raises a one-line :class:`~geosteer.errors.GeosteerError` (docs/serving.md).
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


def scaled_delta(y: torch.Tensor, ref: torch.Tensor, s_par: float, s_perp: float,
                 reduce: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """(s∥−1)·y∥ + (s⊥−1)·y⊥ = (s⊥−1)·y + (s∥−s⊥)·α·ref: what ∥/⊥ scaling (directional paper, Eq. 11)
    adds to y; the closed form of :class:`Form` scaling and :class:`ValueScale`.

    Same convention as ``decompose`` (α = 0 for a zero reference), in as few tensor passes as possible:
    two dot products, one scalar per token, one broadcast multiply (and one more pass when s⊥ ≠ 1).
    ``reduce``: sums the stacked dot products ⟨ref, ref⟩, ⟨y, ref⟩ over the parts of a vector split across
    processes (tensor-parallel ranks), so that y and ref may be this process's part."""
    rr, yr = torch.linalg.vecdot(ref, ref), torch.linalg.vecdot(y, ref)
    if reduce is not None:
        rr, yr = reduce(torch.stack([rr, yr]).contiguous())
    alpha = torch.where(rr > 1e-30, yr / rr.clamp_min(1e-30), 0.0)
    par = ((s_par - s_perp) * alpha).unsqueeze(-1) * ref
    return par if s_perp == 1.0 else par + (s_perp - 1.0) * y


@dataclass(frozen=True, eq=False)
class Form:
    """The closed form of a residual edit (the same edit as its function, term for term) on t at the point.

    ∥/⊥ scaling (``scaled_delta``: u = t − x if ``delta`` else t, α = ⟨u, ref⟩/⟨ref, ref⟩,
    t + (s∥ − s⊥)·α·ref + (s⊥ − 1)·u), a vector (``vectors.apply.steer_tensor``) or ``replace`` (t ← x), on
    the tokens selected by ``from_token``, ``phase`` and ``skip_first``; the others keep t."""

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
