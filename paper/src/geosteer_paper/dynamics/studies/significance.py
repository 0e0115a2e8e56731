"""``geosteer study dynamics significance``: the cross-model rows of the dynamics results (per-layer diagnose
and commutator quantities of two models) as two-sample tests with layers as the unit: bootstrap interval
and permutation p of the difference of layer means. Reads results files only; no model is loaded."""

from __future__ import annotations

from pathlib import Path

import typer

from geosteer.cli.common import JSON_OPT, emit
from geosteer_paper.dynamics.studies.common import CSV_OPT, OUT_OPT, write_rows

DIAGNOSE = ("deficit", "ffn_tangential_frac", "defect", "ddiv_attn", "ddiv_ffn")
COMMUTATOR = ("commutator", "ffn_half", "attn_half", "reorder_angle_deg", "cos_pred_vs_measured")


def _read_rows(path: Path) -> list[dict]:
    from geosteer.errors import GeosteerError
    from geosteer.io_utils import read_json

    if not path.exists() and not path.is_symlink():
        raise GeosteerError(f"results file not found: {path} (run the diagnose and commutator studies first)")
    data = read_json(path, "results file")
    rows = data.get("rows") if isinstance(data, dict) else data
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise GeosteerError(f"results file {path} holds no list of records (rows); run the study again")
    return rows


def layer_values(folder: Path) -> dict[str, list[float]]:
    """Per-layer values of each compared quantity in one model's results folder (ordered by layer)."""
    out: dict[str, list[float]] = {}
    diag = [r for r in _read_rows(folder / "diagnose.json") if r.get("table") == "layers"]
    for q in DIAGNOSE:
        out[q] = [r["mean"] for r in sorted((r for r in diag if r["metric"] == q), key=lambda r: r["layer"])]
    comm = sorted((r for r in _read_rows(folder / "commutator.json") if r.get("table") == "layers"),
                  key=lambda r: r["layer"])
    for q in COMMUTATOR:
        out[q] = [r[q] for r in comm]
    return out


def significance(a: Path = typer.Option(..., "--a", help="results folder A (diagnose.json, commutator.json)"),
                 b: Path = typer.Option(..., "--b", help="results folder B (same files)"),
                 level: float = typer.Option(0.95, "--level", help="bootstrap interval level in (0, 1)"),
                 seed: int = typer.Option(0, "--seed"), as_json: bool = JSON_OPT, out: Path | None = OUT_OPT,
                 csv: Path | None = CSV_OPT) -> None:
    """Cross-model rows (A − B over layers): bootstrap interval and permutation p, layers as the unit."""
    from geosteer.errors import GeosteerError
    from geosteer_paper.dynamics.significance import compare

    if not 0 < level < 1:
        raise GeosteerError(f"--level must be in (0, 1) (got {level})")
    va, vb = layer_values(a), layer_values(b)
    rows = [{"quantity": q, **compare(va[q], vb[q], paired=False, unit="layers", level=level, seed=seed)}
            for q in (*DIAGNOSE, *COMMUTATOR)]
    meta = {"a": str(a), "b": str(b), "level": level, "seed": seed, "test": "two-sample, layers as the unit"}
    write_rows(rows, meta, out, csv)
    emit({"meta": meta, "rows": rows} if as_json else rows, as_json, table_title="A − B over layers")
