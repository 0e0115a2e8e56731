"""Which recipe each token of the engine's current flat batch uses (one table per worker process).

The model runner fills it before every forward (``plugin.track_recipes`` wraps its input preparation):
request ``i`` of the batch contributes ``n_i`` consecutive tokens, and its recipe is the
``geosteer_recipe`` entry of its sampling parameters' ``extra_args`` (absent: the stock model). The
decoder layers read :func:`groups` to apply each recipe to its own rows only.
"""

from __future__ import annotations

import torch

from geosteer.errors import GeosteerError

_NAMES: dict[str, int] = {}  # recipe name -> index, set when the steered model is built
_ROWS: torch.Tensor | None = None  # (tokens,) recipe index per token, -1 = stock
_GROUPS: dict[int, torch.Tensor | None] = {}


def set_recipes(names: list[str]) -> None:
    _NAMES.clear()
    _NAMES.update({n: i for i, n in enumerate(names)})


def recipe_index(name: str | None) -> int:
    """-1 for the stock model (None or empty), else the recipe's index; unknown names are refused."""
    if not name:
        return -1
    if name not in _NAMES:
        valid = ", ".join(sorted(_NAMES)) or "none loaded"
        raise GeosteerError(f"unknown recipe '{name}'; valid: {valid}")
    return _NAMES[name]


def set_rows(per_request: list[tuple[int, int]]) -> None:
    """``[(recipe index, n tokens), ...]`` in batch order."""
    global _ROWS
    if not per_request:
        _ROWS = None
        _GROUPS.clear()
        return
    idx = torch.tensor([r for r, _ in per_request], dtype=torch.long)
    counts = torch.tensor([n for _, n in per_request], dtype=torch.long)
    _ROWS = torch.repeat_interleave(idx, counts)
    _GROUPS.clear()
    present = sorted(set(idx.tolist()) - {-1})
    for r in present:
        rows = torch.nonzero(_ROWS == r).flatten()
        _GROUPS[r] = None if rows.numel() == _ROWS.numel() else rows


def groups(n_tokens: int) -> dict[int, torch.Tensor | None]:
    """{recipe index: its token rows (None = every row)} for a batch of ``n_tokens`` tokens.

    A batch the table does not describe (the engine's warm-up and profiling runs) is the stock model;
    padding rows past the described tokens are stock as well."""
    if _ROWS is None or _ROWS.numel() > n_tokens:
        return {}
    if _ROWS.numel() == n_tokens:
        return dict(_GROUPS)
    return {r: torch.nonzero(_ROWS == r).flatten() for r in _GROUPS}
