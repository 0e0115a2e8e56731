"""Studio edit requests → :mod:`geosteer.manifold.edit` edits of a bank's control nets, each with an undo record.

An edit targets a surface, a head or a layer, optionally a rectangle of the K×K control net (rows = query
axis, paper §5), with the library's operations (``scale``, ``invert``, ``zero``, ``set``, ``grid-wall``,
``wall``). ``apply_edit`` does the edit, so it lands in ``bank.history`` exactly like a CLI edit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from geosteer.manifold.edit import Edit
from geosteer.manifold.edit import apply_edit as manifold_apply
from geosteer.studio.bodies import OPS, SCOPES, EditBody, parse

__all__ = ["OPS", "SCOPES", "EditSpec", "UndoRecord", "apply_edit", "index_of", "parse_edit", "to_edit",
           "undo_edit"]


@dataclass
class EditSpec:
    op: str
    scope: str
    layer: int
    head: int | None = None
    dim: int | None = None
    factor: float | None = None
    value: float | None = None
    rows: tuple[int, int] | None = None
    cols: tuple[int, int] | None = None
    q: tuple[float, float] | None = None  # op wall only
    k: tuple[float, float] | None = None

    def describe(self) -> str:
        where = f"L{self.layer}"
        if self.scope in ("head", "surface"):
            where += f" H{self.head}"
        if self.scope == "surface":
            where += f" D{self.dim}"
        what = {"scale": f"scale ×{self.factor:g}" if self.factor is not None else "scale",
                "set": f"set {self.value:g}" if self.value is not None else "set"}.get(self.op, self.op)
        region = ""
        if self.rows is not None:
            region += f" rows {self.rows[0]}–{self.rows[1]}"
        if self.cols is not None:
            region += f" cols {self.cols[0]}–{self.cols[1]}"
        for name, r in (("q", self.q), ("k", self.k)):
            if r is not None:
                region += f" {name} {r[0]:g}..{r[1]:g}"
        return f"{what} {self.scope} {where}{region}"


@dataclass
class UndoRecord:
    index: tuple
    old: torch.Tensor
    spec: EditSpec
    version_before: int
    entry: dict | None = None  # the bank.history record the edit added
    walls: list | None = None  # the exact walls before a ``wall`` edit (what undo puts back)


def _range(v: Any, name: str, k: int) -> tuple[int, int] | None:
    if v is None:
        return None
    if isinstance(v, int) and not isinstance(v, bool):
        v = (v, v)
    ints = isinstance(v, (list, tuple)) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
    if not (ints and len(v) == 2):
        raise ValueError(f"{name} must be an integer or [first, last] (inclusive), got {v!r}")
    a, b = v
    if not (0 <= a <= b < k):
        raise ValueError(f"{name} [{a}, {b}] out of range: control-net indices are 0–{k - 1}, first ≤ last")
    return (a, b)


def _value_range(v: Any, name: str) -> tuple[float, float] | None:
    """``[lo, hi]`` of a wall in q/k coordinates (null: an open end); lo < hi."""
    import math

    if v is None:
        return None
    ok = isinstance(v, (list, tuple)) and len(v) == 2 and all(
        x is None or (isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)) for x in v)
    if not ok:
        raise ValueError(f"{name} must be [lo, hi] (numbers, null for an open end), got {v!r}")
    lo = -math.inf if v[0] is None else float(v[0])
    hi = math.inf if v[1] is None else float(v[1])
    if not lo < hi:
        raise ValueError(f"{name} [{v[0]}, {v[1]}]: lo must be below hi")
    return (lo, hi)


def parse_edit(body: dict | EditBody, shape: tuple[int, ...], layers: list[int]) -> EditSpec:
    """Validate an edit request (:class:`EditBody`, then against the bank shape (layers, heads, dims, K, K));
    ValueError with one line if bad."""
    e = parse(EditBody, body, "edit must be a JSON object")
    _, heads, dims, k, _ = shape

    def integer(name, v, hi):
        if v is None:
            raise ValueError(f"{name} must be an integer (got None)")
        if not 0 <= v < hi:
            raise ValueError(f"{name} {v} out of range (valid 0–{hi - 1})")
        return v

    if e.layer not in layers:
        raise ValueError(f"layer must be one of the surfaces' layers {layers[0]}–{layers[-1]} (got {e.layer!r})")
    head = integer("head", e.head, heads) if e.scope in ("head", "surface") else None
    dim = integer("dim", e.dim, dims) if e.scope == "surface" else None
    rows = _range(e.rows if e.rows is not None else e.row, "rows", k)
    cols = _range(e.cols if e.cols is not None else e.col, "cols", k)
    if e.op == "wall" and (rows is not None or cols is not None):
        raise ValueError("wall (exact) takes q/k value ranges, not control-net rows/cols; the control-point "
                         "wall is grid-wall")
    if e.op != "wall" and (e.q is not None or e.k is not None):
        raise ValueError(f"{e.op} takes no q/k ranges (only the exact wall does)")
    q, kr = _value_range(e.q, "q"), _value_range(e.k, "k")
    factor = value = None
    if e.op == "scale":
        if e.factor is None or not abs(e.factor) <= 1e3:
            raise ValueError(f"scale needs a numeric factor with |factor| ≤ 1000 (got {e.factor!r})")
        factor = float(e.factor)
    if e.op == "set":
        if e.value is None or not abs(e.value) <= 1e3:
            raise ValueError(f"set needs a numeric value with |value| ≤ 1000 (got {e.value!r})")
        value = float(e.value)
    return EditSpec(e.op, e.scope, e.layer, head, dim, factor, value, rows, cols, q, kr)


def index_of(spec: EditSpec, slot: int) -> tuple:
    """Index into coefficients (layers, heads, dims, K, K) for the spec's target and region."""
    head = slice(None) if spec.head is None else spec.head
    dim = slice(None) if spec.dim is None else spec.dim
    rows = slice(None) if spec.rows is None else slice(spec.rows[0], spec.rows[1] + 1)
    cols = slice(None) if spec.cols is None else slice(spec.cols[0], spec.cols[1] + 1)
    return (slot, head, dim, rows, cols)


def to_edit(spec: EditSpec, layer: int):
    """The equivalent ``geosteer.manifold.edit.Edit``."""

    def span(r):
        return None if r is None else list(range(r[0], r[1] + 1))

    value = spec.factor if spec.op == "scale" else spec.value if spec.op == "set" else None
    heads = None if spec.head is None else [spec.head]
    dims = None if spec.dim is None else [spec.dim]
    if spec.op == "wall":
        return Edit("wall", layers=[layer], heads=heads, dims=dims, q=spec.q, k=spec.k)
    return Edit(spec.op, layers=[layer], heads=heads, dims=dims, rows=span(spec.rows), cols=span(spec.cols),
                value=value)


def apply_edit(bank, spec: EditSpec, version_before: int) -> UndoRecord:
    """Apply ``spec`` to ``bank`` in place (recorded in ``bank.history``); return what undo needs."""

    idx = index_of(spec, bank.slot(spec.layer))
    old = bank.coefficients.detach()[idx].clone()
    walls = list(getattr(bank, "walls", [])) if spec.op == "wall" else None
    entry = manifold_apply(bank, to_edit(spec, spec.layer))
    entry["source"] = "studio"
    return UndoRecord(idx, old, spec, version_before, entry, walls)


def undo_edit(bank, rec: UndoRecord) -> None:
    """Put the old values back and drop the edit's history record."""
    with torch.no_grad():
        bank.coefficients[rec.index] = rec.old
    if rec.walls is not None:
        bank.set_walls(rec.walls)
    if hasattr(bank, "clear_cache"):
        bank.clear_cache()
    if rec.entry is not None and bank.history and bank.history[-1] is rec.entry:
        bank.history.pop()
