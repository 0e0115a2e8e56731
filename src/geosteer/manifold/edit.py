"""Editing learned surfaces (paper §5): scale, invert, zero, set a control point, walls.

An :class:`Edit` selects surfaces (layers, heads, dims, or the ``top`` N by Frobenius norm) and optionally
``rows``/``cols`` of each K×K control net. ``wall`` adds an exact region wall (:mod:`geosteer.manifold.walls`);
``grid-wall`` sets C = −1 (the paper's Table 3 wall, leaky past the grid). Edits are validated against the
bank and recorded in ``bank.history``; :func:`live` applies them for a ``with`` block. The text form
(``"scale=0.5 layer=8 head=3 dim=25"``, ``"wall layer=10 q=2..inf"``) is in docs/guide-manifold.md, "Edit".
"""

from __future__ import annotations

import datetime as _dt
import math
import numbers
import operator
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import torch

from geosteer.manifold.walls import Wall, validate_wall
from geosteer.models.anatomy import parse_indices

OPS = ("scale", "invert", "zero", "set", "wall", "grid-wall")
_KEYS = {"layer": "layers", "layers": "layers", "head": "heads", "heads": "heads", "dim": "dims",
         "dims": "dims", "row": "rows", "rows": "rows", "col": "cols", "cols": "cols", "column": "cols",
         "columns": "cols", "top": "top", "alpha": "value", "value": "value", "q": "q", "k": "k"}


@dataclass
class Edit:
    """One edit (see the module docstring). ``value`` is α for ``scale`` and the value for ``set``."""

    op: str
    layers: list[int] | None = None
    heads: list[int] | None = None
    dims: list[int] | None = None
    rows: list[int] | None = None
    cols: list[int] | None = None
    value: float | None = None
    top: int | None = None
    q: tuple[float, float] | None = None  # wall only: closed q-range (±inf allowed)
    k: tuple[float, float] | None = None  # wall only: closed k-range

    def __post_init__(self) -> None:
        if not isinstance(self.op, str) or self.op not in OPS:
            raise ValueError(f"unknown edit '{self.op}'; valid: {', '.join(OPS)}")
        for name in ("layers", "heads", "dims", "rows", "cols"):
            v = getattr(self, name)
            if v is not None:
                setattr(self, name, _indices(v, name))
        if self.value is not None:
            if isinstance(self.value, bool) or not isinstance(self.value, numbers.Real):
                raise ValueError(f"{self.op} wants a number (got {self.value!r})")
            if not math.isfinite(self.value):
                raise ValueError(f"{self.op} wants a finite number (got {self.value}); NaN and infinity "
                                 "would make the surfaces non-finite")
            self.value = float(self.value)
        if self.op == "scale" and self.value is None:
            raise ValueError("scale needs a factor, e.g. scale=0.5")
        if self.op == "set" and self.value is None:
            raise ValueError("set needs a value, e.g. set=1.5")
        if self.op in ("invert", "zero", "wall", "grid-wall") and self.value is not None:
            raise ValueError(f"{self.op} takes no value")
        if self.op == "wall" and (self.rows is not None or self.cols is not None):
            raise ValueError("wall takes q=LO..HI / k=LO..HI ranges, not control-point rows/cols (the legacy "
                             "C = -1 edit on control points is grid-wall)")
        if self.op != "wall" and (self.q is not None or self.k is not None):
            raise ValueError(f"{self.op} takes no q/k ranges (only wall does)")
        if self.op == "wall":
            from geosteer.manifold.walls import check_range

            self.q = None if self.q is None else check_range(self.q, "q")
            self.k = None if self.k is None else check_range(self.k, "k")
        if self.top is not None:
            top = _indices([self.top], "top")[0] if not isinstance(self.top, list) else None
            if top is None or top < 1:
                raise ValueError(f"top must be a whole number ≥ 1 (got {self.top!r})")
            self.top = top

    def describe(self) -> str:
        verb = self.op + (f"={self.value:g}" if self.value is not None else "")
        parts = [verb]
        for name in ("layers", "heads", "dims", "rows", "cols"):
            v = getattr(self, name)
            if v is not None:
                parts.append(f"{name}={_fmt_list(v)}")
        if self.top is not None:
            parts.append(f"top={self.top}")
        for name in ("q", "k"):
            r = getattr(self, name)
            if r is not None:
                parts.append(f"{name}={_fmt_bound(r[0])}..{_fmt_bound(r[1])}")
        return " ".join(parts)

    def to_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if v is not None}
        for name in ("q", "k"):  # strict JSON: infinite bounds as null
            if name in d:
                d[name] = [None if math.isinf(x) else x for x in d[name]]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Edit:
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


def _fmt_bound(x: float) -> str:
    return "inf" if x == math.inf else "-inf" if x == -math.inf else f"{x:g}"


def parse_range(v: str, text: str) -> tuple[float, float]:
    """``"2..inf"`` → (2, inf); ``"-inf..0"``; ``"-1.5..2"`` (closed; lo < hi)."""
    lo, sep, hi = v.partition("..")
    if not sep:
        raise ValueError(f"'{v}' is not a range LO..HI (in '{text}'); e.g. q=2..inf or k=-1.5..0")
    out = []
    for x in (lo, hi):
        try:
            out.append(float(x))
        except ValueError:
            raise ValueError(f"'{x}' is not a number or ±inf (in '{text}')") from None
    if any(math.isnan(x) for x in out):
        raise ValueError(f"NaN is not a range bound (in '{text}')")
    if not out[0] < out[1]:
        raise ValueError(f"range {v} is empty: it needs LO < HI (in '{text}')")
    return (out[0], out[1])


def _indices(v, name: str) -> list[int]:
    """Whole numbers (an int or a list of them; numpy/torch integers too), else a ValueError naming ``name``."""
    items = v if isinstance(v, (list, tuple)) else [v]
    try:
        if any(isinstance(x, bool) for x in items):
            raise TypeError
        return [operator.index(x) for x in items]
    except TypeError:
        raise ValueError(f"{name} must be whole numbers (got {v!r})") from None


def _fmt_list(xs: Sequence[int]) -> str:
    xs = list(xs)
    if len(xs) > 1 and xs == list(range(xs[0], xs[-1] + 1)):
        return f"{xs[0]}-{xs[-1]}"
    return ",".join(map(str, xs))


def _number(v: str, text: str) -> float:
    """A finite float from the text form, or a ValueError that quotes it."""
    try:
        x = float(v)
    except ValueError:
        raise ValueError(f"'{v}' is not a number (in '{text}')") from None
    if not math.isfinite(x):
        raise ValueError(f"'{v}' is not a finite number (in '{text}'); NaN and infinity are refused")
    return x


def parse_edit(text: str) -> Edit:
    """Parse the text form (module docstring) into an :class:`Edit`."""
    tokens = [t for t in re.split(r"[\s:]+", text.strip()) if t]
    if not tokens:
        raise ValueError("empty edit")
    verb, _, val = tokens[0].partition("=")
    verb = verb.lower()
    if verb not in OPS:
        raise ValueError(f"unknown edit '{verb}' in '{text}'; valid: {', '.join(OPS)}")
    kw: dict = {"op": verb}
    if val:
        kw["value"] = _number(val, text)
    for tok in tokens[1:]:
        key, eq, v = tok.partition("=")
        if not eq or not v:
            raise ValueError(f"'{tok}' should look like key=value (in '{text}'); keys: layer head dim row "
                             "col top value q k")
        name = _KEYS.get(key.lower())
        if name is None:
            raise ValueError(f"unknown key '{key}' (in '{text}'); keys: layer head dim row col top value q k")
        if name == "top":
            if not re.fullmatch(r"[0-9]+", v):
                raise ValueError(f"top wants a whole number ≥ 1, got '{v}' (in '{text}')")
            kw["top"] = int(v)
        elif name == "value":
            kw["value"] = _number(v, text)
        elif name in ("q", "k"):
            kw[name] = parse_range(v, text)
        else:  # the bank checks the layers against those it covers when the edit is applied
            kw[name] = parse_indices(v, None, "layer" if name == "layers" else name[:-1])
    return Edit(**kw)


def _check(values, n: int, what: str) -> None:
    if values is None:
        return
    bad = [x for x in values if not 0 <= x < n]
    if bad:
        raise ValueError(f"{what} {bad[0]} out of range (valid 0–{n - 1})")


def surface_norms(bank, layers=None, heads=None, dims=None) -> torch.Tensor:
    """Frobenius norms (slots, heads, dims) of the control nets (all, or masked to the selection: -1)."""
    c = bank.coefficients.detach().float()
    norms = c.flatten(-2).norm(dim=-1)
    if layers is None and heads is None and dims is None:
        return norms
    keep = torch.zeros_like(norms, dtype=torch.bool)
    sl = [bank.slot(x) for x in layers] if layers is not None else slice(None)
    keep_l = torch.zeros(norms.shape[0], dtype=torch.bool)
    keep_l[sl] = True
    keep_h = torch.zeros(norms.shape[1], dtype=torch.bool)
    keep_h[heads if heads is not None else slice(None)] = True
    keep_d = torch.zeros(norms.shape[2], dtype=torch.bool)
    keep_d[dims if dims is not None else slice(None)] = True
    keep = keep_l[:, None, None] & keep_h[None, :, None] & keep_d[None, None, :]
    return torch.where(keep, norms, torch.full_like(norms, -1.0))


def _mask(bank, e: Edit) -> torch.Tensor:
    """Boolean mask over the coefficients (slots, heads, dims, K, K) selected by ``e`` (validated)."""
    L, H, D, K, _ = bank.coefficients.shape
    if e.layers is not None:
        for x in e.layers:
            bank.slot(x)  # raises naming the covered layers
    _check(e.heads, H, "head")
    _check(e.dims, D, "dim")
    _check(e.rows, K, "row")
    _check(e.cols, K, "column")
    if e.top is not None:
        norms = surface_norms(bank, e.layers, e.heads, e.dims)
        n = int((norms >= 0).sum())
        if e.top > n:
            raise ValueError(f"top {e.top} exceeds the {n} selected surfaces (valid 1–{n})")
        idx = torch.topk(norms.flatten(), e.top).indices
        sel = torch.zeros(L * H * D, dtype=torch.bool)
        sel[idx] = True
        sel = sel.view(L, H, D)
    else:
        ls = torch.zeros(L, dtype=torch.bool)
        ls[[bank.slot(x) for x in e.layers] if e.layers is not None else slice(None)] = True
        hs = torch.zeros(H, dtype=torch.bool)
        hs[e.heads if e.heads is not None else slice(None)] = True
        ds = torch.zeros(D, dtype=torch.bool)
        ds[e.dims if e.dims is not None else slice(None)] = True
        sel = ls[:, None, None] & hs[None, :, None] & ds[None, None, :]
    rs = torch.zeros(K, dtype=torch.bool)
    rs[e.rows if e.rows is not None else slice(None)] = True
    cs = torch.zeros(K, dtype=torch.bool)
    cs[e.cols if e.cols is not None else slice(None)] = True
    net = rs[:, None] & cs[None, :]
    return sel[..., None, None] & net


def walls_from_edit(bank, e: Edit) -> list:
    """The exact walls (``walls.Wall``) a ``wall`` edit adds, validated against the bank's model shape."""

    q = e.q if e.q is not None else (-math.inf, math.inf)
    k = e.k if e.k is not None else (-math.inf, math.inf)
    if e.top is not None:
        sel = _mask(bank, e).any(-1).any(-1)
        by: dict[int, list] = {}
        for s, h, d in torch.nonzero(sel).tolist():
            by.setdefault(bank.layers[s], []).append((h, d))
        walls = [Wall(layer=x, pairs=tuple(ps), q=q, k=k) for x, ps in by.items()]
    else:
        layers = e.layers if e.layers is not None else list(bank.layers)
        walls = [Wall(layer=x, heads=None if e.heads is None else tuple(e.heads),
                      dims=None if e.dims is None else tuple(e.dims), q=q, k=k) for x in layers]
    for w in walls:
        validate_wall(w, n_layers=bank.config.n_layers, layers=bank.layers, n_heads=bank.n_heads,
                      head_dim=bank.head_dim)
    return walls


def _validate(bank, e: Edit) -> None:
    if e.op == "wall":
        walls_from_edit(bank, e)
    else:
        _mask(bank, e)


def apply_edit(bank, edit: Edit | str, record: bool = True) -> dict:
    """Apply one edit in place; returns (and records in ``bank.history``) what was done."""
    e = parse_edit(edit) if isinstance(edit, str) else edit
    if e.op == "wall":
        walls = walls_from_edit(bank, e)
        bank.add_walls(walls)
        n = sum(len(w.resolved_pairs(bank.n_heads, bank.head_dim)) for w in walls)
        rec = {"edit": e.describe(), **e.to_dict(), "surfaces": n, "coefficients": 0,
               "walls": [w.to_dict() for w in walls],
               "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
        if record:
            bank.history.append(rec)
        return rec
    mask = _mask(bank, e).to(bank.coefficients.device)
    c = bank.coefficients
    with torch.no_grad():
        if e.op == "scale":
            scaled = torch.where(mask, c * e.value, c)
            if not bool(torch.isfinite(scaled[mask]).all()):
                raise ValueError(f"'{e.describe()}' would overflow the coefficients to infinity; use a "
                                 "smaller factor")
            c.copy_(scaled)
        elif e.op == "invert":
            c.copy_(torch.where(mask, -c, c))
        elif e.op == "zero":
            c.masked_fill_(mask, 0.0)
        elif e.op == "set":
            c.masked_fill_(mask, float(e.value))
        elif e.op == "grid-wall":
            c.masked_fill_(mask, -1.0)
    surf = mask.any(-1).any(-1)
    rec = {"edit": e.describe(), **e.to_dict(), "surfaces": int(surf.sum()), "coefficients": int(mask.sum()),
           "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    if e.top is not None:
        slots, heads, dims = torch.nonzero(surf, as_tuple=True)
        rec["selected"] = [[bank.layers[int(s)], int(h), int(d)] for s, h, d in zip(slots, heads, dims,
                                                                                    strict=True)]
    bank.clear_cache() if hasattr(bank, "clear_cache") else None
    if record:
        bank.history.append(rec)
    return rec


def _walls_of(bank) -> list:
    return list(getattr(bank, "walls", []))


def _restore(bank, coeff, hist, walls) -> None:
    with torch.no_grad():
        bank.coefficients.copy_(coeff)
    bank.history[:] = hist
    if hasattr(bank, "set_walls"):
        bank.walls = list(walls)
        bank._compiled_walls = None
    bank.clear_cache() if hasattr(bank, "clear_cache") else None


def apply_edits(bank, edits: Sequence[Edit | str], record: bool = True) -> list[dict]:
    """Apply edits in order (all validated first, so a bad one changes nothing)."""
    parsed = [parse_edit(x) if isinstance(x, str) else x for x in edits]
    for e in parsed:
        _validate(bank, e)  # validate everything before touching the coefficients
    saved, hist, walls = bank.coefficients.detach().clone(), list(bank.history), _walls_of(bank)
    try:
        return [apply_edit(bank, e, record=record) for e in parsed]
    except BaseException:  # e.g. an overflow found while applying: put everything back
        _restore(bank, saved, hist, walls)
        raise


@contextmanager
def live(bank, *edits: Edit | str) -> Iterator:
    """Apply ``edits`` for the duration of the block, then restore the coefficients, walls and history."""
    saved = bank.coefficients.detach().clone()
    hist = list(bank.history)
    walls = _walls_of(bank)
    try:
        apply_edits(bank, edits)
        yield bank
    finally:
        _restore(bank, saved, hist, walls)


def wall(layers=None, top: int | None = None, heads=None, dims=None, q=None, k=None) -> Edit:
    """An exact region wall over whole layers, or over the ``top`` N norm surfaces of the selection;
    ``q``/``k`` (lo, hi) restrict the blocked region (default: everything)."""
    return Edit("wall", layers=layers, heads=heads, dims=dims, top=top, q=q, k=k)


def grid_wall(layers=None, top: int | None = None, heads=None, dims=None) -> Edit:
    """The legacy wall (C = −1): blocks only where q and k both lie inside the grid (see the docstring)."""
    return Edit("grid-wall", layers=layers, heads=heads, dims=dims, top=top)


def control_net(bank, layer: int, head: int, dim: int) -> torch.Tensor:
    """The K×K control net of one surface (rows = query axis, columns = key axis)."""
    slot = bank.slot(layer)
    _check([head], bank.coefficients.shape[1], "head")
    _check([dim], bank.coefficients.shape[2], "dim")
    return bank.coefficients[slot, head, dim].detach().float().cpu().clone()


def format_control_net(net: torch.Tensor, fmt: str = "{:+.3f}") -> str:
    """Text table of a control net with row/column indices (rows = query axis)."""
    K = net.shape[0]
    w = max(len(fmt.format(float(x))) for x in net.flatten())
    head = " q\\k " + " ".join(f"{j:>{w}d}" for j in range(K))
    lines = [head]
    for i in range(K):
        lines.append(f"{i:>4d} " + " ".join(f"{fmt.format(float(x)):>{w}s}" for x in net[i]))
    return "\n".join(lines)
