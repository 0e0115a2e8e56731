"""Studio edit requests → ``geosteer.manifold.edit`` edits of a bank's control nets, each with an undo record.

An edit targets a surface (layer, head, dim), a head (all its dims) or a layer (all heads and dims), and
optionally a rectangle of the K×K control net (``rows``/``cols`` inclusive ranges; rows = query axis,
columns = key axis, paper §5). Operations (paper §5): ``scale`` (αC), ``invert`` (−C, gain 1 + S → 1 − S),
``zero`` (0), ``set`` (a value, e.g. one control point), ``wall`` (−1: since the cubic B-spline basis is a
partition of unity inside the fitted range, C ≡ −1 on a region makes S = −1 there, gain 0). The studio's
``wall`` is the library's ``grid-wall`` edit (control points, so it blocks only where q and k lie inside
the grid); exact region walls that also block past the grid are ``wall`` edits of the CLI/library
(``geosteer manifold edit "wall layer=… q=a..b k=c..d"``), which the studio lists
(``/api/info`` ``walls``, the "Exact walls" panel) but does not draw or edit yet.
The studio validates the JSON request (its shape with the pydantic model
:class:`geosteer.studio.bodies.EditBody`, then the indices against the bank; one-line messages), keeps the
old values of the edited block for undo, and lets ``geosteer.manifold.edit.apply_edit`` do the edit (so it
is recorded in ``bank.history`` and saved with the artifact exactly like a CLI edit).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

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
        return f"{what} {self.scope} {where}{region}"


@dataclass
class UndoRecord:
    index: tuple
    old: torch.Tensor
    spec: EditSpec
    version_before: int
    entry: dict | None = None  # the bank.history record the edit added


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
        raise ValueError(f"layer must be one of the bank's layers {layers[0]}–{layers[-1]} (got {e.layer!r})")
    head = integer("head", e.head, heads) if e.scope in ("head", "surface") else None
    dim = integer("dim", e.dim, dims) if e.scope == "surface" else None
    rows = _range(e.rows if e.rows is not None else e.row, "rows", k)
    cols = _range(e.cols if e.cols is not None else e.col, "cols", k)
    factor = value = None
    if e.op == "scale":
        if e.factor is None or not abs(e.factor) <= 1e3:
            raise ValueError(f"scale needs a numeric factor with |factor| ≤ 1000 (got {e.factor!r})")
        factor = float(e.factor)
    if e.op == "set":
        if e.value is None or not abs(e.value) <= 1e3:
            raise ValueError(f"set needs a numeric value with |value| ≤ 1000 (got {e.value!r})")
        value = float(e.value)
    return EditSpec(e.op, e.scope, e.layer, head, dim, factor, value, rows, cols)


def index_of(spec: EditSpec, slot: int) -> tuple:
    """Index into coefficients (layers, heads, dims, K, K) for the spec's target and region."""
    head = slice(None) if spec.head is None else spec.head
    dim = slice(None) if spec.dim is None else spec.dim
    rows = slice(None) if spec.rows is None else slice(spec.rows[0], spec.rows[1] + 1)
    cols = slice(None) if spec.cols is None else slice(spec.cols[0], spec.cols[1] + 1)
    return (slot, head, dim, rows, cols)


def to_edit(spec: EditSpec, layer: int):
    """The equivalent ``geosteer.manifold.edit.Edit``."""
    from geosteer.manifold.edit import Edit

    def span(r):
        return None if r is None else list(range(r[0], r[1] + 1))

    value = spec.factor if spec.op == "scale" else spec.value if spec.op == "set" else None
    op = "grid-wall" if spec.op == "wall" else spec.op  # control-point wall (see the module docstring)
    return Edit(op, layers=[layer], heads=None if spec.head is None else [spec.head],
                dims=None if spec.dim is None else [spec.dim], rows=span(spec.rows), cols=span(spec.cols),
                value=value)


def apply_edit(bank, spec: EditSpec, version_before: int) -> UndoRecord:
    """Apply ``spec`` to ``bank`` in place (recorded in ``bank.history``); return what undo needs."""
    from geosteer.manifold.edit import apply_edit as manifold_apply

    idx = index_of(spec, bank.slot(spec.layer))
    old = bank.coefficients.detach()[idx].clone()
    entry = manifold_apply(bank, to_edit(spec, spec.layer))
    entry["source"] = "studio"
    return UndoRecord(idx, old, spec, version_before, entry)


def undo_edit(bank, rec: UndoRecord) -> None:
    """Put the old values back and drop the edit's history record."""
    with torch.no_grad():
        bank.coefficients[rec.index] = rec.old
    if hasattr(bank, "clear_cache"):
        bank.clear_cache()
    if rec.entry is not None and bank.history and bank.history[-1] is rec.entry:
        bank.history.pop()
