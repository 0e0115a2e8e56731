"""``geosteer study dynamics ov-spectrum``: weight-only OV diagnostics per head (paper App. C.6, Fig. 14) with and
without the attention pre-norm's gain folded in: the skew/sym ratio, the dominant eigenvalue read by largest
modulus and by largest real part (is it real and > 0?). Tables ``head`` and ``summary`` (one row per norm
reading, and per layer) in one tidy file via ``--out``."""

from __future__ import annotations

from pathlib import Path

import typer

from geosteer.cli.common import DEVICE_OPT, DTYPE_OPT, JSON_OPT, MODEL_OPT, THREADS_OPT, emit
from geosteer_paper.dynamics.studies.common import CSV_OPT, OUT_OPT, check_choices, run_meta, setup_model, write_rows

SUMMARY_KEYS = ("ov_norm", "heads", "skew_sym_ratio_mean", "frac_dominant_positive",
                "frac_dominant_by_real_positive", "frac_max_real_positive")


def ov_spectrum(model: str = MODEL_OPT,
                ov_norms: str = typer.Option("none,gain", "--ov-norms",
                                             help="OV readings: none (from the normed input), gain (the "
                                                  "pre-norm gain folded in, as in the critical study)"),
                as_json: bool = JSON_OPT, out: Path | None = OUT_OPT, csv: Path | None = CSV_OPT,
                threads: int = THREADS_OPT, device: str = DEVICE_OPT, dtype: str = DTYPE_OPT) -> None:
    """OV non-symmetry and the sign of the dominant eigenvalue (largest modulus / largest real part) per head."""
    from geosteer.dynamics.ov import OV_NORMS, ov_rows, ov_summary

    norms = check_choices(ov_norms, OV_NORMS, "ov_norm (--ov-norms)")
    m, _ = setup_model(model, threads, device, dtype)
    rows: list[dict] = []
    summary: list[dict] = []
    for norm in norms:
        heads = ov_rows(m, norm)
        rows += [{"table": "head", **r} for r in heads]
        summary.append({"table": "summary", "layer": "all", **ov_summary(heads)})
        for layer in sorted({r["layer"] for r in heads}):
            summary.append({"table": "summary", "layer": layer,
                            **ov_summary([r for r in heads if r["layer"] == layer])})
    meta = run_meta(m, ov_norms=norms)
    write_rows(summary + rows, meta, out, csv)
    shown = [{k: s[k] for k in SUMMARY_KEYS} for s in summary if s["layer"] == "all"]
    emit({"meta": meta, "summary": summary} if as_json else shown, as_json,
         table_title="OV dominant eigenvalues (fraction of heads)")
