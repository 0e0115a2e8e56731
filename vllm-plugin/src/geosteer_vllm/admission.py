"""The one check every request passes before it reaches a steered engine, whatever route it came by.

vLLM's input processor (wrapped by ``plugin.guard_requests``) calls :func:`check` on a request's
``extra_args``: ``geosteer_recipe`` must name a recipe loaded at start, ``geosteer_spec`` must have been
admitted here by :func:`admit` (validated as at start); anything else is a one-line 400. :func:`salt` gives
each recipe its own prefix-cache salt (and the prompt length where a recipe treats prompt tokens apart).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

from geosteer.errors import GeosteerError
from geosteer_vllm.batch import RECIPE_FIELD, SPEC_FIELD
from geosteer_vllm.inline import Policy, canonical, plan_inline

MAX_ADMITTED = 1024  # inline recipes kept admitted (least recently used dropped first)

_STATE: dict = {"named": {}, "meta": None, "policy": None, "capture": None, "stages": None}
_ADMITTED: OrderedDict = OrderedDict()  # canonical text -> RecipePlan


def configure(named: dict, meta=None, policy: Policy | None = None, stages: dict | None = None) -> None:
    """The recipes loaded at start ({name: RecipePlan}); with ``meta`` (a weightless model of the served
    one) inline recipes are admitted under ``policy``; ``stages``: the engine runs its steering in a compiled
    graph with these stages (``serve.graph``), which an inline recipe must fit."""
    _STATE.update(named=dict(named), meta=meta, policy=policy, stages=stages)
    _ADMITTED.clear()


def set_capture(folder: str, n_layers: int, width: int) -> None:
    """Captures on: the engine's capture folder, its layers and residual width."""
    _STATE["capture"] = (folder, n_layers, width)


def capture_config() -> tuple | None:
    """(capture folder, layers, width), or None when this engine does not capture."""
    return _STATE["capture"]


def issue_capture(doc: object) -> dict:
    """A checked ``geosteer_capture`` object with the token the input processor will admit."""
    from geosteer_vllm import capture

    if _STATE["capture"] is None:
        raise GeosteerError("this server does not capture activations (start it with --max-capture)")
    return capture.issue(capture.parse(doc, _STATE["capture"][1]))


def collect_capture(cap: dict, n_positions: int) -> dict:
    from geosteer_vllm import capture

    folder, _, width = _STATE["capture"]
    return capture.collect(folder, cap, width, n_positions)


def collect_capture_quietly(cap: dict) -> None:
    """Drop a failed request's capture file."""
    from geosteer_vllm import capture

    if _STATE["capture"] is not None:
        capture.path_of(_STATE["capture"][0], cap["token"]).unlink(missing_ok=True)
        capture.forget(cap["token"])


def inline_enabled() -> bool:
    return _STATE["meta"] is not None


def named() -> dict:
    return dict(_STATE["named"])


def admit(doc: object) -> str:
    """Validate an inline recipe object and admit it; its canonical text (the engine's ``geosteer_spec``)."""
    if not inline_enabled():
        raise GeosteerError("this server takes recipes by name only; valid: "
                            f"{', '.join(_STATE['named']) or 'none'}")
    try:
        canon = canonical(doc, _STATE["policy"] or Policy())
        plan = _ADMITTED.get(canon) or plan_inline(canon, _STATE["meta"])
    except (OSError, ValueError) as e:  # a value the system or a builder cannot take (a name too long to look up)
        raise GeosteerError(f"this recipe cannot be built: {' '.join(str(e).split())[:200]}") from None
    if canon not in _ADMITTED:
        if plan.attention_layers:
            raise GeosteerError("surfaces, walls and scale_site=value_full are served from recipes named at start "
                                "(geosteer serve --recipe NAME=DIR), not inline")
        if _STATE["stages"] is not None:
            from geosteer_vllm import graph

            graph.check_inline(plan, _STATE["stages"])
        _ADMITTED[canon] = plan
        while len(_ADMITTED) > MAX_ADMITTED:
            _ADMITTED.popitem(last=False)
    _ADMITTED.move_to_end(canon)
    return canon


def check(extra: dict | None, names: list[str] | None = None):
    """The plan a request's ``extra_args`` ask for (None: stock); one line when the engine does not hold it.
    ``names``: the recipes the engine loaded (default: those :func:`configure` was given)."""
    extra = extra or {}
    name, canon = extra.get(RECIPE_FIELD), extra.get(SPEC_FIELD)
    known = list(_STATE["named"]) if names is None else list(names)
    if name is not None and canon is not None:
        raise GeosteerError(f"give {RECIPE_FIELD} or {SPEC_FIELD}, not both")
    if canon is not None:
        if not isinstance(canon, str) or canon not in _ADMITTED:
            raise GeosteerError(f"{SPEC_FIELD} is set by the server; give {RECIPE_FIELD} as a recipe name "
                                f"({', '.join(known) or 'none loaded'}) or an object of recipe keys")
        return _ADMITTED[canon]
    if name is None or name == "":
        return None
    if not isinstance(name, str) or name not in known:
        raise GeosteerError(f"unknown recipe {str(name)[:80]!r}; valid: {', '.join(known) or 'none loaded'}")
    return _STATE["named"].get(name, name)


def salt(plan, prompt_len: int, user_salt: str | None) -> str | None:
    """The prefix-cache salt of a request under ``plan`` (a RecipePlan, or a bare name)."""
    if plan is None:
        return user_salt
    if isinstance(plan, str):
        key, extra = f"named:{plan}", ""
    else:
        if plan.neutral:
            return user_salt
        key, extra = plan.key, (f":prompt={prompt_len}" if plan.prompt_dependent else "")
    digest = hashlib.sha256(f"{key}{extra}:{user_salt or ''}".encode()).hexdigest()[:32]
    return f"geosteer-{digest}"
