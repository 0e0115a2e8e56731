"""Studio edit requests → in-place edits of a bank's control nets, each with an undo record.

An edit targets a surface (layer, head, dim), a head (all its dims) or a layer (all heads and dims), and
optionally a rectangle of the K×K control net (``rows``/``cols`` inclusive ranges; rows = query axis,
columns = key axis, paper §5). Operations (paper §5): ``scale`` (αC), ``invert`` (−C, gain 1 + S → 1 − S),
``zero`` (0), ``set`` (a value, e.g. one control point), ``wall`` (−1: since the cubic B-spline basis is a
partition of unity inside the fitted range, C ≡ −1 on a region makes S = −1 there, gain 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

OPS = ("scale", "invert", "zero", "set", "wall")
SCOPES = ("surface", "head", "layer")


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


def parse_edit(body: dict, shape: tuple[int, ...], layers: list[int]) -> EditSpec:
    """Validate an edit request against the bank shape (layers, heads, dims, K, K); ValueError if bad."""
    if not isinstance(body, dict):
        raise ValueError("edit must be a JSON object")
    unknown = set(body) - {"op", "scope", "layer", "head", "dim", "factor", "value", "rows", "cols", "row",
                           "col"}
    if unknown:
        raise ValueError(f"unknown edit field(s) {sorted(unknown)}")
    op, scope = body.get("op"), body.get("scope", "surface")
    if op not in OPS:
        raise ValueError(f"op must be one of {', '.join(OPS)} (got {op!r})")
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)} (got {scope!r})")
    _, heads, dims, k, _ = shape

    def integer(name, hi):
        v = body.get(name)
        if not isinstance(v, int) or isinstance(v, bool):
            raise ValueError(f"{name} must be an integer (got {v!r})")
        if not 0 <= v < hi:
            raise ValueError(f"{name} {v} out of range (valid 0–{hi - 1})")
        return v

    layer = body.get("layer")
    if not isinstance(layer, int) or isinstance(layer, bool) or layer not in layers:
        raise ValueError(f"layer must be one of the bank's layers {layers[0]}–{layers[-1]} (got {layer!r})")
    head = integer("head", heads) if scope in ("head", "surface") else None
    dim = integer("dim", dims) if scope == "surface" else None
    rows = _range(body.get("rows", body.get("row")), "rows", k)
    cols = _range(body.get("cols", body.get("col")), "cols", k)
    factor = value = None
    if op == "scale":
        factor = body.get("factor")
        if not isinstance(factor, (int, float)) or isinstance(factor, bool) or not abs(factor) <= 1e3:
            raise ValueError(f"scale needs a numeric factor with |factor| ≤ 1000 (got {factor!r})")
        factor = float(factor)
    if op == "set":
        value = body.get("value")
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not abs(value) <= 1e3:
            raise ValueError(f"set needs a numeric value with |value| ≤ 1000 (got {value!r})")
        value = float(value)
    return EditSpec(op, scope, layer, head, dim, factor, value, rows, cols)


def index_of(spec: EditSpec, slot: int) -> tuple:
    """Index into coefficients (layers, heads, dims, K, K) for the spec's target and region."""
    head = slice(None) if spec.head is None else spec.head
    dim = slice(None) if spec.dim is None else spec.dim
    rows = slice(None) if spec.rows is None else slice(spec.rows[0], spec.rows[1] + 1)
    cols = slice(None) if spec.cols is None else slice(spec.cols[0], spec.cols[1] + 1)
    return (slot, head, dim, rows, cols)


@torch.no_grad()
def apply_edit(coefficients: torch.Tensor, spec: EditSpec, slot: int, version_before: int) -> UndoRecord:
    """Apply ``spec`` in place on ``coefficients``; return what undo needs."""
    idx = index_of(spec, slot)
    view = coefficients[idx]
    old = view.detach().clone()
    if spec.op == "scale":
        new = old * spec.factor
    elif spec.op == "invert":
        new = -old
    elif spec.op == "zero":
        new = torch.zeros_like(old)
    elif spec.op == "set":
        new = torch.full_like(old, spec.value)
    else:  # wall
        new = torch.full_like(old, -1.0)
    coefficients[idx] = new
    return UndoRecord(idx, old, spec, version_before)


@torch.no_grad()
def undo_edit(coefficients: torch.Tensor, rec: UndoRecord) -> None:
    coefficients[rec.index] = rec.old
