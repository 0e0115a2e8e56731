"""``geosteer show DIR``: what any artifact folder holds, through the format table of the method registry
(surfaces, steering vectors, FFN gates, learned scales, recipes, a plugin's format)."""

from __future__ import annotations

import json

import typer

from geosteer.cli.common import JSON_OPT, emit


def _cell(v):
    """A value as one line: scalars as they are, the rest as compact JSON (cut at 200 characters)."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    text = json.dumps(v, default=str, separators=(",", ":"), ensure_ascii=False)
    return text if len(text) <= 200 else text[:199] + "…"


def _table(rows: list[dict]) -> list[dict]:
    """Rows with the union of their keys (first-seen order), so rows of different shapes share columns."""
    keys = list(dict.fromkeys(k for r in rows for k in r))
    return [{k: _cell(r.get(k, "")) for k in keys} for r in rows]


def show_cmd(folder: str = typer.Argument(..., help="artifact folder, shipped artifact name or Hub repo id "
                                          "org/name[@revision]"),
             as_json: bool = JSON_OPT) -> None:
    """What an artifact holds, for every format: its config (base model, settings) and contents (surfaces:
    shapes, grid, training, walls, edits, largest surfaces; other formats: their fields and tensors)."""
    from geosteer.methods import describe_artifact

    info = describe_artifact(folder)
    if as_json:
        emit(info, True)
        return
    tables = {k: v for k, v in info.items() if isinstance(v, list) and v and all(isinstance(r, dict) for r in v)}
    emit({k: _cell(v) for k, v in info.items() if k not in tables and v != []}, False)
    for name, rows in tables.items():
        emit(_table(rows), False, table_title=name)


def register(app: typer.Typer) -> None:
    app.command("show")(show_cmd)
