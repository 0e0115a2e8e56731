"""The studio's JSON request bodies as pydantic models: strict types, choices, unknown fields refused.

:func:`parse` turns the first problem into one line (``ValueError``, 400); what depends on the session
(indices, prompt length, names) is checked by the session. The app parses JSON itself
(:func:`geosteer.studio.server.read_json`) so that NaN, Infinity and deep nesting are one-line 400s too.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

OPS = ("scale", "invert", "zero", "set", "grid-wall", "wall")  # the library's names (geosteer.manifold.edit)
SCOPES = ("surface", "head", "layer")
REFERENCES = ("loaded", "previous", "none")


class Body(BaseModel):
    """A request body: strict types, unknown fields refused, immutable."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    noun: ClassVar[str] = ""  # "edit " in "unknown edit field(s)"


class EffectBody(Body):
    """``/api/effect`` and an edit's ``effect``: the generation to compare (``Session.check_effect``)."""

    prompt: str | None = None  # None: the session's default prompt
    max_new_tokens: int = 20  # 1..the session's cap
    reference: Literal["loaded", "previous", "none"] = "loaded"


class EditBody(Body):
    """``/api/edit`` without its ``effect`` (``geosteer.studio.edits.parse_edit``)."""

    noun: ClassVar[str] = "edit "
    op: Literal["scale", "invert", "zero", "set", "grid-wall", "wall"]
    scope: Literal["surface", "head", "layer"] = "surface"
    layer: int
    head: int | None = None  # needed for scope surface/head
    dim: int | None = None  # needed for scope surface
    factor: float | None = None  # op scale, |factor| <= 1000
    value: float | None = None  # op set, |value| <= 1000
    rows: Any = None  # an index or [first, last] (inclusive) of the control net; checked against K
    cols: Any = None
    row: Any = None  # aliases of rows/cols for one control point
    col: Any = None
    q: Any = None  # op wall: [lo, hi] of the query coordinate (null for an open end); default the whole line
    k: Any = None  # op wall: [lo, hi] of the key coordinate


class SaveBody(Body):
    """``/api/save``: a plain artifact name inside the workspace (``Session.save``)."""

    name: Any = None  # the name rules (and their message) are session.safe_child's
    overwrite: bool = False


class LoadBody(Body):
    """``/api/load``."""

    name: Any = None


class UndoBody(Body):
    """``/api/undo``: an empty object."""


B = TypeVar("B", bound=Body)


def parse(model: type[B], data: object, what: str) -> B:
    """``data`` validated as ``model``; a ``ValueError`` with one line naming the first problem otherwise.
    ``what`` names the body in the message for a non-object (e.g. ``"edit must be a JSON object"``)."""
    if isinstance(data, model):
        return data
    if not isinstance(data, dict):
        raise ValueError(what)
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ValueError(message(model, e)) from None


def _got(v: object) -> str:
    return repr(v)[:40]


def message(model: type[Body], e: ValidationError) -> str:
    """The studio's one-line message for a pydantic validation error."""
    errors = e.errors(include_url=False)
    extra = sorted(str(err["loc"][0]) for err in errors if err["type"] == "extra_forbidden")
    if extra:
        return f"unknown {model.noun}field(s) {extra[:10]}; valid: {sorted(model.model_fields)}"
    err = errors[0]
    name = ".".join(str(p) for p in err["loc"]) or "body"
    kind, got = err["type"], _got(err.get("input"))
    if kind == "literal_error":
        return f"{name} must be one of {err['ctx']['expected'].replace(' or ', ', ')} (got {got})"
    if kind == "missing":
        return f"{name} is required"
    what = {"int_type": "an integer", "bool_type": "true or false", "float_type": "a number",
            "string_type": "a string", "model_type": "an object", "dict_type": "an object"}.get(kind)
    if what is not None:
        return f"{name} must be {what} (got {got})"
    return f"{name}: {err['msg']} (got {got})"[:300]
