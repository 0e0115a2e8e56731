"""The concept file of the steering benchmark (``bench decide --concepts``, ``bench judge --concepts``).

A concept file is a JSON list (format 1) or ``{"format": "geosteer-concepts", "version": 2, "concepts": [...]}``
(format 2); each concept is ``{"name", "direction": "promote"|"suppress", "positive": [texts that show the
concept], "negative": [texts that do not], "prompts": [prompts to continue]}``, with an optional
``"description"`` (the words the prompting lever's instruction uses; default: the name) and an optional
``"instruction"`` (the prompting lever's whole instruction, e.g. the one the concept was admitted with, in place
of the sentence built from the description; at most MAX_INSTRUCTION characters). A format-2 concept may
also carry ``"groups": {"positive": [ids], "negative": [ids]}``, one id per text of each side: texts of one group
(e.g. the answers to one request, on either side) are held out together when ``bench decide`` deals them into
judge and admission texts; a group id that is also one of the prompts names that prompt's request, whose texts
are held out of the lever and judge texts of a seed that tests it. How a concept's texts are dealt is
:mod:`geosteer.bench.decide_concepts`'.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from geosteer.errors import GeosteerError
from geosteer.readers import ReadRefused, parse_json, read_text

MIN_TEXTS = 4  # per side (bench decide asks more of a file: decide_concepts.file_concept)
MIN_PROMPTS = 2
MAX_FILE_BYTES = 32 * 1024 * 1024
MAX_INSTRUCTION = 2000  # characters of a concept's own instruction
FORMAT = "geosteer-concepts"
VERSION = 2  # 2: the versioned object, whose concepts may group their texts; 1: a bare list, texts ungrouped


def _schema():
    from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_serializer, model_validator

    class Concept(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
        direction: Literal["promote", "suppress"]
        positive: list[str] = Field(min_length=MIN_TEXTS)
        negative: list[str] = Field(min_length=MIN_TEXTS)
        prompts: list[str] = Field(min_length=MIN_PROMPTS)
        description: str | None = None
        instruction: str | None = None

        @field_validator("instruction")
        @classmethod
        def _instruction(cls, v: str | None) -> str | None:
            if v is not None and (not v.strip() or len(v) > MAX_INSTRUCTION):
                raise ValueError(f"must be a non-empty string of at most {MAX_INSTRUCTION} characters")
            return v

        @model_serializer(mode="wrap")
        def _dump(self, handler):  # a concept without its own instruction dumps as it did before the key existed
            doc = handler(self)
            if doc.get("instruction") is None:
                doc.pop("instruction", None)
            return doc

        @field_validator("positive", "negative", "prompts")
        @classmethod
        def _non_empty(cls, v: list[str]) -> list[str]:
            if any(not s.strip() for s in v):
                raise ValueError("holds an empty string")
            if len(set(v)) != len(v):
                raise ValueError("holds the same text twice")
            return v

    class Groups(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        positive: list[str]
        negative: list[str]

        @field_validator("positive", "negative")
        @classmethod
        def _ids(cls, v: list[str]) -> list[str]:
            if any(not s.strip() for s in v):
                raise ValueError("holds an empty group id")
            return v

    class FileConcept(Concept):  # a concept as a file gives it (the levers read Concept: no groups)
        groups: Groups | None = None

        @model_validator(mode="after")
        def _one_id_a_text(self):
            g = self.groups
            if g is not None and (len(g.positive) != len(self.positive) or len(g.negative) != len(self.negative)):
                raise ValueError(f"groups: {len(g.positive)}/{len(g.negative)} ids for {len(self.positive)}/"
                                 f"{len(self.negative)} positive/negative texts; give one group id per text")
            return self

    return Concept, TypeAdapter(list[FileConcept])


SHAPE = ('a JSON list of {"name", "direction": "promote"|"suppress", "positive": [>= 4 texts], '
         '"negative": [>= 4 texts], "prompts": [>= 2 prompts], optional "description", optional "instruction"}, '
         'or {"format": '
         f'"{FORMAT}", "version": {VERSION}, "concepts": [such concepts, each with optional "groups": '
         '{"positive": [an id a text], "negative": [an id a text]}]}')


def _first_error(e) -> str:
    err = e.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ()))
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    return f"{where}: {msg}" if where else msg


def _unwrap(doc, p) -> tuple[object, int]:
    """(the list of concepts, the file's format version) of a parsed file; a format this version of geosteer
    does not read: one line."""
    if isinstance(doc, list):
        return doc, 1
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise GeosteerError(f"--concepts {p}: expected a non-empty list or a {FORMAT!r} object; {SHAPE}")
    version = doc.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 2:
        raise GeosteerError(f"--concepts {p}: format version {version!r}: this geosteer reads a bare list "
                            f"(format 1) or versions 2 to {VERSION} of {FORMAT!r}")
    if version > VERSION:
        raise GeosteerError(f"--concepts {p}: format version {version} is newer than this geosteer reads (1 to "
                            f"{VERSION}); update geosteer")
    extra = sorted(set(doc) - {"format", "version", "concepts"})
    if extra:
        raise GeosteerError(f"--concepts {p}: unknown key {extra[0]!r}; {SHAPE}")
    return doc.get("concepts"), version


def read_concepts(path: str | Path) -> list:
    """The concepts of ``path`` (pydantic models; ``groups`` None when a concept has none), or a one-line
    :class:`GeosteerError` naming what is wrong."""
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
    doc, version = _unwrap(doc, p)
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
    grouped = next((c.name for c in concepts if c.groups is not None), None)
    if version == 1 and grouped is not None:
        raise GeosteerError(f"--concepts {p}: concept {grouped!r} has groups, which a bare list (format 1) cannot "
                            f"carry; write {{\"format\": \"{FORMAT}\", \"version\": {VERSION}, \"concepts\": "
                            "[...]}")
    return concepts


def concept_from_dict(doc: dict):
    """A concept from its ``model_dump()`` (how a concept travels to a worker process)."""
    return _schema()[0].model_validate(doc)


def file_concept_from_dict(doc: dict):
    """A concept as a file gives it (format 2: optional ``groups``) from a dict; pydantic's ``ValidationError``
    (its locations start with the index 0) when it is not one."""
    return _schema()[1].validate_python([doc])[0]


def describe(concept) -> str:
    """The words an instruction uses for the concept."""
    return concept.description or concept.name.replace("_", " ").replace("-", " ")
