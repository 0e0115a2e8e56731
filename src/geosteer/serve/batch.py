"""Which recipe each token of the engine's current flat batch uses (one table per worker process).

The model runner fills it before every forward (``plugin.track_recipes`` wraps its input preparation):
request ``i`` of the batch contributes ``n_i`` consecutive tokens, and its recipe comes from its sampling
parameters' ``extra_args``: ``geosteer_recipe`` names a recipe loaded at start, ``geosteer_spec`` carries an
inline recipe (its settings as canonical JSON, admitted by the server: ``serve.admission``), built here on
first use and kept in a bounded table; neither (or a recipe that does nothing): the stock model. The decoder
layers read :func:`groups` and :func:`ops` to apply each recipe to its own rows only, and :func:`tokens`
for where those rows sit in their sequences.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import torch

from geosteer.errors import GeosteerError
from geosteer.served import LayerOps, Tokens

RECIPE_FIELD = "geosteer_recipe"  # extra_args: the name of a recipe loaded at start
SPEC_FIELD = "geosteer_spec"  # extra_args: an inline recipe's canonical settings (JSON text)
MAX_INLINE = 64  # inline recipes kept built per worker (least recently used dropped first)

_NAMED: dict = {}  # name -> RecipePlan, set when the steered model is built
_INLINE: OrderedDict = OrderedDict()  # canonical settings -> RecipePlan
_BUILD: list[Callable] = []  # canonical settings -> RecipePlan (set with the steered model)
_PLANS: list = []  # this step's distinct plans; a group index points here
_ROWS: torch.Tensor | None = None  # (tokens,) group index per token, -1 = stock
_PROMPT_LEN: torch.Tensor | None = None  # (tokens,) prompt length of each token's sequence
_GROUPS: dict[int, torch.Tensor | None] = {}


def set_recipes(plans: list, build: Callable | None = None) -> None:
    """The recipes loaded at start (``serve.plan.RecipePlan``) and the builder of inline ones."""
    _NAMED.clear()
    _NAMED.update({p.name: p for p in plans})
    _INLINE.clear()
    _BUILD[:] = [build] if build is not None else []


def plan_for(extra: dict | None):
    """The plan a request's ``extra_args`` ask for (None: the stock model). Unknown names are refused."""
    extra = extra or {}
    name, canon = extra.get(RECIPE_FIELD), extra.get(SPEC_FIELD)
    if canon:
        plan = _INLINE.get(canon)
        if plan is None:
            if not _BUILD:
                raise GeosteerError("this engine serves no inline recipes")
            plan = _BUILD[0](canon)
            _INLINE[canon] = plan
            while len(_INLINE) > MAX_INLINE:
                _INLINE.popitem(last=False)
        _INLINE.move_to_end(canon)
    elif name:
        if name not in _NAMED:
            raise GeosteerError(f"unknown recipe '{name}'; valid: {', '.join(sorted(_NAMED)) or 'none loaded'}")
        plan = _NAMED[name]
    else:
        return None
    return None if plan.neutral else plan


def set_rows(per_request: list[tuple[object, int, int]]) -> None:
    """``[(plan or None, n tokens, prompt length), ...]`` in batch order."""
    global _ROWS, _PROMPT_LEN
    _PLANS.clear()
    _GROUPS.clear()
    if not per_request:
        _ROWS = _PROMPT_LEN = None
        return
    index: dict[int, int] = {}
    idx = []
    for plan, _, _ in per_request:
        if plan is None:
            idx.append(-1)
            continue
        if id(plan) not in index:
            index[id(plan)] = len(_PLANS)
            _PLANS.append(plan)
        idx.append(index[id(plan)])
    counts = torch.tensor([n for _, n, _ in per_request], dtype=torch.long)
    _ROWS = torch.repeat_interleave(torch.tensor(idx, dtype=torch.long), counts)
    _PROMPT_LEN = torch.repeat_interleave(torch.tensor([p for _, _, p in per_request], dtype=torch.long), counts)
    for r in range(len(_PLANS)):
        rows = torch.nonzero(_ROWS == r).flatten()
        _GROUPS[r] = None if rows.numel() == _ROWS.numel() else rows


def groups(n_tokens: int) -> dict[int, torch.Tensor | None]:
    """{group index: its token rows (None = every row)} for a batch of ``n_tokens`` tokens.

    A batch the table does not describe (the engine's warm-up and profiling runs) is the stock model;
    padding rows past the described tokens are stock as well."""
    if _ROWS is None or _ROWS.numel() > n_tokens:
        return {}
    if _ROWS.numel() == n_tokens:
        return dict(_GROUPS)
    return {r: torch.nonzero(_ROWS == r).flatten() for r in _GROUPS}


def plan(r: int):
    """The plan of group ``r`` of this step."""
    return _PLANS[r]


def ops(r: int, layer: int) -> LayerOps | None:
    """Group ``r``'s operations on ``layer`` (None: it leaves the layer alone)."""
    return _PLANS[r].layers.get(layer)


def tokens(positions: torch.Tensor) -> Tokens:
    """Where every row of this step's batch sits: ``positions`` (from vLLM) and each row's prompt length."""
    pos = positions if positions.dim() == 1 else positions[0]  # (3, n) multimodal positions: the text row
    n = pos.shape[0]
    plen = torch.zeros(n, dtype=torch.long, device=positions.device)
    if _PROMPT_LEN is not None and _PROMPT_LEN.numel() <= n:
        plen[:_PROMPT_LEN.numel()] = _PROMPT_LEN.to(positions.device)
    return Tokens(pos, plen)
