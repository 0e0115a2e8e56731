"""Which recipe each token of the engine's current flat batch uses (one table per worker process).

Filled before every forward (``plugin.track_recipes``) from each request's ``extra_args`` (a recipe loaded
at start, or an admitted inline recipe built on first use, bounded); neither means the stock model. The
decoder layers read :func:`groups`, :func:`ops` and :func:`tokens`.
"""

from __future__ import annotations

import logging
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
_CAPTURES: list[tuple] = []  # this step's captures: (token, point, layers, positions, first row, end row)
_CAPTURE_DIR: list[str] = []
_FAILED: OrderedDict = OrderedDict()  # failures already logged (bounded)
logger = logging.getLogger("vllm.geosteer")  # vLLM's handler prints it beside its own lines


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


LIMIT = 1e37  # the largest magnitude a recipe's edit hands on (float32 holds 3.4e38: a sum of a few stays finite)


def bounded(t: torch.Tensor) -> torch.Tensor:
    """``t`` with NaN as 0 and every value within ±:data:`LIMIT`: what a recipe's edits hand on, so that a recipe
    whose numbers overflow the model garbles only its own rows, never the KV-cache blocks that later requests
    reuse (a stale NaN there reaches them through attention)."""
    return torch.nan_to_num(t, nan=0.0, posinf=LIMIT, neginf=-LIMIT).clamp(-LIMIT, LIMIT)


def failed(what: str, err: BaseException) -> None:
    """Log a failure of one request's steering inside the engine's step, once per ``what``: the engine goes
    on, and the rows it concerns keep the values they had (the front refuses every such request first, so this
    is the last guard, not a path a request is meant to take)."""
    if what in _FAILED:
        return
    _FAILED[what] = True
    while len(_FAILED) > 256:
        _FAILED.popitem(last=False)
    logger.error("geosteer: %s failed inside the engine's step, left unsteered: %s: %s", what,
                 type(err).__name__, str(err)[:300])


def plan_or_stock(req_id: str, extra: dict | None):
    """:func:`plan_for`, or None (the stock model) for a request whose recipe cannot be built here, logged
    by :func:`failed`: one request must not stop the engine."""
    try:
        return plan_for(extra)
    except Exception as e:  # noqa: BLE001 - any failure of one request's recipe stays with that request
        failed(f"the recipe of request {str(req_id)[:80]}", e)
        return None


def set_capture_dir(folder: str | None) -> None:
    """Where the steered layers write captured activations (``serve.capture``); None: captures are off."""
    _CAPTURE_DIR[:] = [folder] if folder else []


def capture_dir() -> str | None:
    return _CAPTURE_DIR[0] if _CAPTURE_DIR else None


def set_rows(per_request: list[tuple]) -> None:
    """``[(plan or None, n tokens, prompt length[, capture or None]), ...]`` in batch order."""
    global _ROWS, _PROMPT_LEN
    _PLANS.clear()
    _GROUPS.clear()
    _CAPTURES.clear()
    _TOKENS.clear()
    if not per_request:
        _ROWS = _PROMPT_LEN = None
        return
    start = 0
    for item in per_request:
        cap = item[3] if len(item) > 3 else None
        if cap is not None and _CAPTURE_DIR:
            _CAPTURES.append((cap["token"], cap["point"], set(cap["layers"]), cap["positions"], start,
                              start + item[1]))
        start += item[1]
    index: dict[int, int] = {}
    idx = []
    for plan, *_ in per_request:
        if plan is None:
            idx.append(-1)
            continue
        if id(plan) not in index:
            index[id(plan)] = len(_PLANS)
            _PLANS.append(plan)
        idx.append(index[id(plan)])
    counts = torch.tensor([item[1] for item in per_request], dtype=torch.long)
    _ROWS = torch.repeat_interleave(torch.tensor(idx, dtype=torch.long), counts)
    _PROMPT_LEN = torch.repeat_interleave(torch.tensor([item[2] for item in per_request], dtype=torch.long), counts)
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


def captures(layer: int, point: str | None = None) -> list[tuple]:
    """This step's captures on ``layer`` (at ``point``): (token, positions, first row, end row)."""
    return [(tok, pos, a, b) for tok, pt, layers, pos, a, b in _CAPTURES
            if layer in layers and (point is None or pt == point)]


def plan(r: int):
    """The plan of group ``r`` of this step."""
    return _PLANS[r]


def ops(r: int, layer: int) -> LayerOps | None:
    """Group ``r``'s operations on ``layer`` (None: it leaves the layer alone)."""
    return _PLANS[r].layers.get(layer)


_TOKENS: list = []  # (positions tensor, Tokens) of this step, made once for all its layers


def tokens(positions: torch.Tensor) -> Tokens:
    """Where every row of this step's batch sits: ``positions`` (from vLLM) and each row's prompt length."""
    if _TOKENS and _TOKENS[0][0] is positions:
        return _TOKENS[0][1]
    pos = positions if positions.dim() == 1 else positions[0]  # (3, n) multimodal positions: the text row
    n = pos.shape[0]
    plen = torch.zeros(n, dtype=torch.long, device=positions.device)
    if _PROMPT_LEN is not None and _PROMPT_LEN.numel() <= n:
        plen[:_PROMPT_LEN.numel()] = _PROMPT_LEN.to(positions.device)
    _TOKENS[:] = [(positions, Tokens(pos, plen))]
    return _TOKENS[0][1]
