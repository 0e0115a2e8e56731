"""``geosteer show DIR``: what any artifact folder holds, through the format table of the method registry
(surfaces, steering vectors, FFN gates, learned scales, recipes, a plugin's format)."""

from __future__ import annotations

import json
from pathlib import Path

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


def _export_opt(ctx: typer.Context, param: typer.CallbackParam, value: Path | None) -> Path | None:
    """``--export``: a new file that can be written (checked before the artifact is read)."""
    from geosteer.errors import GeosteerError
    from geosteer.io_utils import check_output_path

    if value is not None and not ctx.resilient_parsing:
        check_output_path(value, what="--export")
        if value.exists():
            raise GeosteerError(f"--export {value} exists; choose another file")
    return value


def show_cmd(folder: str = typer.Argument(..., help="artifact folder, shipped artifact name or Hub repo id "
                                          "org/name[@revision]"),
             export: Path | None = typer.Option(None, "--export", callback=_export_opt,
                                                help="also write the artifact as this file, in the format its "
                                                "suffix names (steering vectors: .gguf, llama.cpp's "
                                                "control-vector file)"),
             as_json: bool = JSON_OPT) -> None:
    """What an artifact holds, for every format: its config (base model, settings) and contents (surfaces:
    shapes, grid, training, walls, edits, largest surfaces; other formats: their fields and tensors);
    --export writes it in another file format."""
    from geosteer.methods import describe_artifact, export_artifact

    info = describe_artifact(folder)
    if export is not None:
        info["export"] = str(export_artifact(folder, export))
    if as_json:
        emit(info, True)
        return
    tables = {k: v for k, v in info.items() if isinstance(v, list) and v and all(isinstance(r, dict) for r in v)}
    emit({k: _cell(v) for k, v in info.items() if k not in tables and v != []}, False)
    for name, rows in tables.items():
        emit(_table(rows), False, table_title=name)


def register(app: typer.Typer) -> None:
    app.command("show")(show_cmd)
