"""The concept file of the steering benchmark (``bench decide --concepts``, ``bench judge --concepts``).

A concept file is a JSON list; each concept is ``{"name", "direction": "promote"|"suppress", "positive":
[texts that show the concept], "negative": [texts that do not], "prompts": [prompts to continue]}``, with an
optional ``"description"`` (the words the prompting lever's instruction uses; default: the name). How a concept's
texts are dealt to the levers, the judge and its admission is :mod:`geosteer.bench.decide_concepts`'.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from geosteer.errors import GeosteerError
from geosteer.readers import ReadRefused, parse_json, read_text

MIN_TEXTS = 4  # per side (bench decide asks more of a file: decide_concepts.file_concept)
MIN_PROMPTS = 2
MAX_FILE_BYTES = 32 * 1024 * 1024


def _schema():
    from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

    class Concept(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
        direction: Literal["promote", "suppress"]
        positive: list[str] = Field(min_length=MIN_TEXTS)
        negative: list[str] = Field(min_length=MIN_TEXTS)
        prompts: list[str] = Field(min_length=MIN_PROMPTS)
        description: str | None = None

        @field_validator("positive", "negative", "prompts")
        @classmethod
        def _non_empty(cls, v: list[str]) -> list[str]:
            if any(not s.strip() for s in v):
                raise ValueError("holds an empty string")
            if len(set(v)) != len(v):
                raise ValueError("holds the same text twice")
            return v

    return Concept, TypeAdapter(list[Concept])


SHAPE = ('a JSON list of {"name", "direction": "promote"|"suppress", "positive": [>= 4 texts], '
         '"negative": [>= 4 texts], "prompts": [>= 2 prompts], optional "description"}')


def _first_error(e) -> str:
    err = e.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ()))
    return f"{where}: {err.get('msg', 'invalid')}" if where else err.get("msg", "invalid")


def read_concepts(path: str | Path) -> list:
    """The concepts of ``path`` (pydantic models), or a one-line :class:`GeosteerError` naming what is wrong."""
    from pydantic import ValidationError

    if hasattr(path, "read_text") and not isinstance(path, (str, Path)):  # a bundled package resource
        p, text = path, path.read_text(encoding="utf-8")
    else:
        p = Path(path)
        try:
            text = read_text(p, what="--concepts", limit=MAX_FILE_BYTES)
        except ReadRefused as e:
            raise GeosteerError(f"{e}; expected {SHAPE}") from None
    try:
        doc = parse_json(text, p, what="--concepts")
    except ReadRefused as e:
        raise GeosteerError(f"{e}; expected {SHAPE}") from None
    _, adapter = _schema()
    if not isinstance(doc, list) or not doc:
        raise GeosteerError(f"--concepts {p}: expected a non-empty list; {SHAPE}")
    try:
        concepts = adapter.validate_python(doc)
    except ValidationError as e:
        raise GeosteerError(f"--concepts {p}: concept {_first_error(e)}; expected {SHAPE}") from None
    names = [c.name for c in concepts]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise GeosteerError(f"--concepts {p}: the name {dup!r} is used twice; names must be unique")
    return concepts


def concept_from_dict(doc: dict):
    """A concept from its ``model_dump()`` (how a concept travels to a worker process)."""
    return _schema()[0].model_validate(doc)


def describe(concept) -> str:
    """The words an instruction uses for the concept."""
    return concept.description or concept.name.replace("_", " ").replace("-", " ")
