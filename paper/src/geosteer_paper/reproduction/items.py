"""Item data: one file per paper (``items/<paper>.json``), validated into :class:`Item` records.

Each criterion quotes the paper's sentence it tests (``claim``) and says what part of it it tests (``role``):
the headline claim, a number the paper states (``magnitude``; its bounds come from the item's
``paper_numbers``), or another part of the claim. A malformed file is refused with one line naming the file,
the item and the field."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from geosteer.errors import GeosteerError

AGGREGATES = ("first", "last", "min", "max", "mean", "sum", "count")
CRITERIA = ("below", "above", "between", "within_rel", "within_abs", "sign", "equals", "order", "close",
            "difference")
ROLES = ("claim", "magnitude", "part", "setup")
CLAIM_KINDS = ("finding", "formula", "procedure", "future work", "limitation", "extension")
ENCODINGS = ("tokenizer", "bos-first", "bos-window", "none")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ID = re.compile(r"^[1-9][0-9]?\.[1-9][0-9]?$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Query(_Strict):
    """Where one number lives in a results file: a key path, optional row filter, a field, an aggregate;
    or (text files) a regular expression whose first group is the number."""

    path: str | None = None  # dot-separated keys / list indices, e.g. "meta.summary" or "rows.0"
    where: dict[str, str | int | float | bool | None] | None = None
    field: str | None = None
    pick: Literal["first", "last", "min", "max", "mean", "sum", "count"] = "first"
    regex: str | None = None
    file: str | None = None  # another results file than the item's

    @model_validator(mode="after")
    def _shape(self) -> Query:
        if self.regex is not None:
            if self.path or self.where or self.field:
                raise ValueError("regex cannot be combined with path / where / field")
            from geosteer.readers import safe_regex

            if safe_regex(self.regex).groups < 1:  # ValueError for a pattern that could backtrack for ever
                raise ValueError("regex needs one capturing group")
        elif self.field is None and self.pick != "count" and self.where is None and self.path is None:
            raise ValueError("give path, field, where or regex")
        if self.where is not None and self.field is None and self.pick != "count":
            raise ValueError("where without field needs pick 'count'")
        return self


class Criterion(_Strict):
    """A declared test on the item's named values; all of an item's criteria must hold to reproduce."""

    kind: Literal["below", "above", "between", "within_rel", "within_abs", "sign", "equals", "order", "close",
                  "difference"]
    value: str | None = None  # a name from the item's ``ours``
    values: list[str] | None = None  # order: names whose values rise strictly; close: two names within band;
    # difference: two names a, b with lo <= b - a <= hi
    threshold: float | None = None  # below / above
    lo: float | None = None
    hi: float | None = None
    ref: float | None = None  # within_rel / within_abs / equals
    band: float | None = None  # within_rel: relative; within_abs: absolute
    sign: Literal[1, -1] | None = None
    claim: str = Field(min_length=1)  # the paper's sentence this criterion tests, quoted
    role: Literal["claim", "magnitude", "part", "setup"] = "claim"  # setup: the run follows the paper's procedure
    against: Literal["paper", "self"] = "paper"  # self: the bound is geosteer's own number, not the paper's
    se: list[str] | None = None  # names of standard errors (combined in quadrature): undecided within 2 s.e.
    p: str | None = None  # name of a p-value: undecided above 0.05

    @model_validator(mode="after")
    def _fields(self) -> Criterion:
        need = {"below": ("value", "threshold"), "above": ("value", "threshold"), "between": ("value", "lo", "hi"),
                "within_rel": ("value", "ref", "band"), "within_abs": ("value", "ref", "band"),
                "sign": ("value", "sign"), "equals": ("value", "ref"), "order": ("values",),
                "close": ("values", "band"), "difference": ("values", "lo", "hi")}[self.kind]
        missing = [f for f in need if getattr(self, f) is None]
        if missing:
            raise ValueError(f"criterion '{self.kind}' needs {', '.join(missing)}")
        if self.kind == "order" and len(self.values or []) < 2:
            raise ValueError("criterion 'order' needs at least two values")
        if self.kind in ("close", "difference") and len(self.values or []) != 2:
            raise ValueError(f"criterion '{self.kind}' needs exactly two values")
        return self

    def names(self) -> list[str]:
        return (list(self.values or []) + ([self.value] if self.value else []) + list(self.se or [])
                + ([self.p] if self.p else []))

    def bounds(self) -> list[float]:
        """The numbers the criterion compares against (its threshold, band edges or reference)."""
        band = [self.band] if self.kind == "close" else []
        return [x for x in (self.threshold, self.lo, self.hi, self.ref, *band) if x is not None]


class Item(_Strict):
    """One paper item. ``results_file`` None: the result lives only in prose or is missing ("not run").
    ``check``: a formula check whose status comes from the checks file (``geosteer study checks``)."""

    id: str
    name: str = Field(min_length=1)
    claim: str = Field(min_length=1)
    paper_value: str | float | int | None = None
    results_file: str | None = None
    ours: dict[str, Query] = Field(default_factory=dict)
    criteria: list[Criterion] = Field(default_factory=list)
    reading: str = Field(min_length=1)
    command: str | None = None
    model: str | None = None
    check: bool = False
    claim_kind: Literal["finding", "formula", "procedure", "future work", "limitation", "extension"] = "finding"
    paper_numbers: list[float] = Field(default_factory=list)  # the numbers the paper states for this claim
    untested: list[str] = Field(default_factory=list)  # parts of the paper's claim no criterion tests, and why
    paper_code: str | None = None  # where the paper's own code differs from its text
    # how the measured texts were encoded: as the tokenizer does, BOS-first (geosteer's former default), or in
    # BOS-first windows (the protocol of the dynamics verbs)
    encoding: Literal["tokenizer", "bos-first", "bos-window", "none"] | None = None

    @model_validator(mode="before")
    @classmethod
    def _check_is_formula(cls, data):
        if isinstance(data, dict) and data.get("check") and "claim_kind" not in data:
            data = {**data, "claim_kind": "formula"}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> Item:
        if not _ID.match(self.id):
            raise ValueError(f"id '{self.id}' is not '<paper>.<number>' (e.g. 1.7)")
        for name in self.ours:
            if not _NAME.match(name):
                raise ValueError(f"ours: '{name}' is not a plain name (letters, digits, _)")
        unknown = sorted({n for c in self.criteria for n in c.names()} - set(self.ours))
        if unknown:
            raise ValueError(f"criteria name values not in ours: {', '.join(unknown)}")
        if self.check and (self.results_file or self.ours or self.criteria):
            raise ValueError("a check item takes its status from the checks file: no results_file, ours, criteria")
        if self.results_file is None and (self.ours or self.criteria):
            raise ValueError("ours / criteria given without a results_file")
        if self.results_file is not None and not (self.ours and self.criteria):
            raise ValueError("a results_file needs ours and criteria")
        if self.check and self.claim_kind != "formula":
            raise ValueError("a check item is a formula: claim_kind 'formula'")
        for c in self.criteria:
            if c.role == "magnitude" and not c.bounds():
                raise ValueError(f"magnitude criterion '{c.kind}' compares against no number")
            stray = [b for b in c.bounds() if c.role in ("magnitude", "setup") and not _among(b, self.paper_numbers)]
            if stray:
                raise ValueError(f"{c.role} criterion bound {stray[0]:g} is not one of paper_numbers")
            if (c.kind in ("equals", "within_rel", "within_abs") and c.against == "paper" and c.ref
                    and not _among(c.ref, self.paper_numbers)):
                raise ValueError(f"criterion '{c.kind}' compares with {c.ref:g}, which is not one of paper_numbers: "
                                 "add the paper's number or declare against 'self'")
        for p in [self.results_file] + [q.file for q in self.ours.values()]:
            if p is not None and (Path(p).is_absolute() or ".." in Path(p).parts):
                raise ValueError(f"results path '{p}' must be relative and stay under the results root")
        return self


def _among(x: float, numbers: list[float]) -> bool:
    return any(abs(x - n) <= 1e-9 * max(1.0, abs(n)) for n in numbers)


class PaperItems(_Strict):
    number: int = Field(ge=1)
    paper: str = Field(min_length=1)
    title: str = Field(min_length=1)
    items: list[Item]

    @model_validator(mode="after")
    def _ids_of_this_paper(self) -> PaperItems:
        for i, item in enumerate(self.items):
            if not item.id.startswith(f"{self.number}."):
                raise ValueError(f"items.{i}: id '{item.id}' does not start with the paper number {self.number}")
        return self


def _first_error(e: ValidationError, data) -> str:
    err = e.errors()[0]
    loc = list(err["loc"])
    item = "?"
    if len(loc) >= 2 and loc[0] == "items" and isinstance(loc[1], int):
        raw = data["items"][loc[1]] if loc[1] < len(data.get("items", [])) else {}
        item = raw.get("id", f"#{loc[1] + 1}") if isinstance(raw, dict) else f"#{loc[1] + 1}"
        loc = loc[2:]
    field = ".".join(str(x) for x in loc) or "(item)"
    return f"item {item}: field {field}: {err['msg']}"


def load_paper(source: str | Path, text: str | None = None) -> PaperItems:
    """Validate one paper's item file; :class:`GeosteerError` with one line naming item and field."""
    name = Path(str(source)).name
    from geosteer.readers import ReadRefused, parse_json, read_json

    try:
        data = parse_json(text, name) if text is not None else read_json(source, what="item file")
    except ReadRefused as e:
        raise GeosteerError(f"item file {name}: cannot read it as JSON ({e})") from None
    if not isinstance(data, dict):
        raise GeosteerError(f"item file {name}: expected an object with paper, title, items")
    try:
        paper = PaperItems.model_validate(data)
    except ValidationError as e:
        raise GeosteerError(f"item file {name}: {_first_error(e, data)}") from None
    ids = [i.id for i in paper.items]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise GeosteerError(f"item file {name}: item {dup[0]}: field id: used twice")
    return paper


def shipped_files() -> list[tuple[str, str]]:
    """(name, text) of the shipped item files, in paper order."""
    root = resources.files("geosteer_paper.reproduction") / "items"
    files = sorted(p for p in root.iterdir() if p.name.endswith(".json"))
    return [(p.name, p.read_text(encoding="utf-8")) for p in files]


def load_items(paths: list[str | Path] | None = None) -> list[PaperItems]:
    """Every paper's items: the shipped files, or ``paths``."""
    papers = [load_paper(p) for p in paths] if paths is not None else \
        [load_paper(name, text) for name, text in shipped_files()]
    return sorted(papers, key=lambda p: p.number)
