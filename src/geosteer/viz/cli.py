"""CLI verb ``geosteer report`` (self-contained HTML) and the q/k token dots it draws
(:func:`record_qk_points`, written by ``geosteer measure explore --record-qk``)."""

from __future__ import annotations

from pathlib import Path

import typer

from geosteer.cli.common import JSON_OPT, emit
from geosteer.cli.outputs import HTML, out_dir, out_file

QK_PROMPT = "The theory of relativity states that"


def report(
    results: list[Path] = typer.Argument(..., help="tidy result files (.json/.csv), surface artifact "
                                         "folders, recorded q/k files, or folders of these"),
    out: Path = typer.Option(Path("report.html"), "--out", "-o", help="the HTML file to write",
                              callback=out_file(*HTML)),
    title: str = typer.Option("geosteer report", "--title"),
    png: Path | None = typer.Option(None, "--png", help="also write each figure as PNG into this folder "
                                    "(needs kaleido and a local Chromium)", callback=out_dir()),
    as_json: bool = JSON_OPT,
) -> None:
    """One self-contained HTML report (plotly.js inline, opens offline) from result files."""
    from geosteer.viz.report import build_report

    summary = build_report(list(results), out, title=title, png_dir=png)
    emit(summary, as_json)
    if summary.get("png_problem"):
        typer.echo(f"note: {summary['png_problem']}", err=True)


def register(app: typer.Typer) -> None:
    app.command("report")(report)


def record_qk_points(model, tok, bank, surfaces: Path, model_name: str, prompt: str, top: int, out: Path) -> dict:
    """Record ``prompt``'s post-RoPE (q, k) self-pairs on the ``top`` largest surfaces per layer of ``bank``
    (installed on ``model`` for the pass) and write them to ``out`` as tidy records for ``geosteer report``."""
    from geosteer.interventions import steer
    from geosteer.io_utils import write_records
    from geosteer.viz import surfaces as S

    if top < 1:
        raise ValueError(f"--top must be >= 1 (got {top})")
    picks = S.default_picks(bank, top)
    layers = sorted({lay for lay, _, _ in picks})
    with steer(model, bank):
        labels, qs, ks = S.record_qk_tensors(model, tok, prompt, layers)
    rows = S.qk_rows(labels, qs, ks, picks)
    meta = {"kind": "qk-points", "model": model_name, "surfaces": str(surfaces), "prompt": prompt,
            "top_per_layer": top, "tokens": labels}
    write_records(out, rows, meta)
    return {"out": str(out), "rows": len(rows), "tokens": len(labels), "surfaces": len(picks)}


