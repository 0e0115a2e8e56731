"""Reading one number out of a results file: JSON (key path, row filter, field, aggregate), CSV (row
filter, field, aggregate) or text (a regular expression). No code from the data is ever evaluated."""

from __future__ import annotations

import math
import re
from pathlib import Path

from geosteer_paper.reproduction.items import Query


class NotReadable(Exception):
    """The file or the value is missing or unreadable: the item shows as "not run" with this reason."""


def read_results(path: Path):
    """The parsed file: JSON object/list, CSV rows (dicts), or text; bounded (:mod:`geosteer.readers`: regular
    files only, size and nesting caps), so a FIFO, a device or a hostile file is "not run", never a hang."""
    from geosteer.readers import ReadRefused, read_csv_rows, read_json, read_text

    if not path.exists() and not path.is_symlink():
        raise NotReadable(f"results file {path.name} is missing")
    suffix = path.suffix.lower()
    try:
        if suffix == ".json":
            return read_json(path, what="results file")
        if suffix == ".csv":
            return [{k: _cell(v) for k, v in row.items()} for row in read_csv_rows(path, what="results file")]
        return read_text(path, what="results file", limit=MAX_TEXT_BYTES)
    except ReadRefused as e:
        raise NotReadable(str(e).replace(str(path), path.name)) from None


MAX_TEXT_BYTES = 1 << 20  # a text results file that a pattern is searched in


def _cell(v: str | None):
    if v is None or v == "":
        return None
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return {"True": True, "False": False, "true": True, "false": False}.get(v, v)


def _walk(obj, path: str | None):
    for key in (path.split(".") if path else []):
        if isinstance(obj, dict) and key in obj:
            obj = obj[key]
        elif isinstance(obj, list) and re.fullmatch(r"-?\d+", key) and -len(obj) <= int(key) < len(obj):
            obj = obj[int(key)]
        else:
            raise NotReadable(f"key '{key}' of '{path}' is missing")
    return obj


def _matches(row, where: dict) -> bool:
    return isinstance(row, dict) and all(k in row and row[k] == v for k, v in where.items())


def _number(v, what: str) -> float:
    if isinstance(v, bool):  # a verdict written into the file, not a measurement
        raise NotReadable(f"{what} is a true/false flag, not a number: statuses are computed from numbers")
    if isinstance(v, (int, float)) and math.isfinite(v):
        return float(v)
    raise NotReadable(f"{what} is not a finite number (got {str(v)[:40]!r})")


def _aggregate(values: list, q: Query, what: str) -> float:
    if q.pick == "count":
        return float(len(values))
    if not values:
        raise NotReadable(f"no row matches {what}")
    nums = [_number(v, what) for v in values]
    if q.pick in ("first", "last"):
        return nums[0] if q.pick == "first" else nums[-1]
    return {"min": min, "max": max, "sum": sum, "mean": lambda x: sum(x) / len(x)}[q.pick](nums)


def evaluate_query(data, q: Query) -> float:
    """The number ``q`` names in ``data`` (as :func:`read_results` returned it); :class:`NotReadable` else."""
    if q.regex is not None:
        if not isinstance(data, str):
            raise NotReadable("a regex query needs a text results file")
        from geosteer.readers import ReadRefused, safe_regex, search_lines

        try:
            found = search_lines(safe_regex(q.regex), data, source="the results file")
        except (ReadRefused, ValueError) as e:
            raise NotReadable(str(e)) from None
        found = [f[0] if isinstance(f, tuple) else f for f in found]
        try:
            return _aggregate([float(f) for f in found], q, f"regex {q.regex!r}")
        except ValueError:
            raise NotReadable(f"regex {q.regex!r} matched text that is not a number") from None
    node = _walk(data, q.path)
    what = ".".join(x for x in [q.path, q.field] if x) or "the file"
    if q.where is not None:
        if not isinstance(node, list):
            raise NotReadable(f"'{q.path or '(top)'}' is not a list of rows")
        rows = [r for r in node if _matches(r, q.where)]
        what += f" where {q.where}"
        if q.field is None:
            return _aggregate(rows, q, what) if q.pick == "count" else _aggregate([], q, what)
        missing = [r for r in rows if q.field not in r]
        if missing:
            raise NotReadable(f"field '{q.field}' is missing in a row of {what}")
        return _aggregate([r[q.field] for r in rows], q, what)
    if q.field is not None:
        if isinstance(node, list):
            return _aggregate([_walk(r, q.field) for r in node], q, what)
        node = _walk(node, q.field)
    if isinstance(node, list):
        return _aggregate(node, q, what)
    return _number(node, what)
