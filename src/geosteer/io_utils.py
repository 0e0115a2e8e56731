"""Atomic file writes (temp file in the same folder + fsync + rename): no half-written results."""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path


def read_json(path: str | Path, what: str, error: type[Exception] | None = None):
    """The JSON document at ``path``; a missing file or bad JSON raises ``error`` (default
    :class:`geosteer.errors.GeosteerError`) with one line that names ``what`` / the file."""
    from geosteer.errors import GeosteerError

    error = error or GeosteerError
    p = Path(path)
    if not p.is_file():
        raise error(f"{what} not found: {p}")
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise error(f"{p} is not valid JSON ({e})") from None


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, default=_default) + "\n")


def atomic_write_csv(path: str | Path, rows: Iterable[dict]) -> Path:
    rows = list(rows)
    buf = io.StringIO()
    fields: list[str] = []
    for r in rows:
        for k in r:
            if k not in fields:
                fields.append(k)
    w = csv.DictWriter(buf, fieldnames=fields)
    w.writeheader()
    w.writerows(rows)
    return atomic_write_text(path, buf.getvalue())


def write_records(path: str | Path, rows: list[dict], meta: dict | None = None) -> Path:
    """Tidy records to ``.csv`` (rows only) or ``.json`` (``{"meta": ..., "rows": [...]}``)."""
    path = Path(path)
    if path.suffix.lower() == ".csv":
        return atomic_write_csv(path, rows)
    return atomic_write_json(path, {"meta": meta or {}, "rows": rows})


def _default(o):
    try:
        import torch

        if isinstance(o, torch.Tensor):
            return o.tolist()
    except ImportError:  # pragma: no cover
        pass
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
