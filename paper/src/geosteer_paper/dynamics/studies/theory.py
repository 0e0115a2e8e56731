"""``geosteer study dynamics theory``: the numerical checks of Thm 3, Eq. (9) and Eq. (11) on the real fields of
chosen layers (tables ``branch``, ``jacobian`` and ``region`` in one tidy file via ``--out``)."""

from __future__ import annotations

from pathlib import Path

import typer

from geosteer.cli.common import DEVICE_OPT, DTYPE_OPT, JSON_OPT, MODEL_OPT, THREADS_OPT, emit
from geosteer_paper.dynamics.studies.common import (
    CSV_OPT,
    OUT_OPT,
    parse_floats,
    parse_ints,
    run_meta,
    setup_model,
    write_rows,
)


def _layer_rows(m, ell: int, tracks: int, alphas: list[float], flow_alphas: list[float], ids, residuals: int,
                seed: int, steps: int, dt: float, every: int, ov_norm: str) -> list[dict]:
    import torch

    from geosteer_paper.dynamics.continuation import continue_alpha, ov_start_points
    from geosteer_paper.dynamics.critical import residual_seeds
    from geosteer_paper.dynamics.fields import ReducedField, layer_fields
    from geosteer_paper.dynamics.theory import (
        branch_errors,
        loglog_slope,
        region_bound_along_flow,
        split_jacobian_check,
    )

    full = layer_fields(m, ell, ("full",), ov_norm=ov_norm)["full"]
    rows: list[dict] = []
    for t, u0 in enumerate(ov_start_points(full.V, tracks)):
        br = branch_errors(full.V, full.phi, u0, alphas)
        ok = [r for r in br if r["converged"]]  # the slope of the branch Newton still holds
        slope = loglog_slope([r["alpha"] for r in ok], [r["error_deg"] for r in ok])
        rows += [{"table": "branch", "layer": ell, "track": t, **r, "loglog_slope": slope} for r in br]
        for r in continue_alpha(full.V, full.phi, u0[None], 4):
            rec = split_jacobian_check(full.V, full.phi, torch.tensor(r["u"], dtype=torch.float64), r["alpha"])
            rows.append({"table": "jacobian", "layer": ell, "track": t, "score": r["score"], **rec})
    u = residual_seeds(m, ids, ell, residuals, seed)
    for a in flow_alphas:
        field = ReducedField("full", V=full.V, phi=full.phi, alpha=a)
        for r in region_bound_along_flow(field, u, steps, dt, every):
            rows.append({"table": "region", "layer": ell, "alpha": a, "time": r["record"] * every * dt, **r})
    return rows


def theory(model: str = MODEL_OPT, layers: str = typer.Option("5,15", "--layers", help="comma-separated layers"),
           tracks: int = typer.Option(2, "--tracks", help="zeros of g_0 (top real eigenvectors of V) per layer"),
           alphas: str = typer.Option("0.005,0.01,0.02,0.04,0.08", "--alphas",
                                      help="small FFN gains for the first-order branch (increasing, > 0)"),
           flow_alphas: str = typer.Option("0,1", "--flow-alphas", help="FFN gains of the flows for Eq. (11)"),
           residuals: int = typer.Option(128, "--residuals", help="real residual directions started on the flow"),
           steps: int = typer.Option(200, "--steps"), dt: float = typer.Option(0.1, "--dt"),
           every: int = typer.Option(20, "--every", help="record the bound every this many steps"),
           tokens: int = typer.Option(512, "--tokens"), seq_len: int = typer.Option(256, "--context"),
           seed: int = typer.Option(0, "--seed"),
           ov_norm: str = typer.Option("gain", "--ov-norm", help="fold the attention pre-norm gain: gain|none"),
           as_json: bool = JSON_OPT, out: Path | None = OUT_OPT, csv: Path | None = CSV_OPT,
           threads: int = THREADS_OPT, device: str = DEVICE_OPT, dtype: str = DTYPE_OPT) -> None:
    """Thm 3's first-order branch, J* = J_A + αJ_Φ and the invariant-region bound on real fields."""
    from geosteer.dynamics.diagnostics import corpus_windows
    from geosteer.errors import GeosteerError

    ells = parse_ints(layers, "--layers")
    al = parse_floats(alphas, "--alphas")
    if min(al) <= 0 or al != sorted(al):
        raise GeosteerError(f"--alphas must be increasing and > 0 (got '{alphas}')")
    fa = parse_floats(flow_alphas, "--flow-alphas")
    if min(tracks, residuals, steps, every) < 1 or residuals < 2 or not dt > 0:
        raise GeosteerError("--tracks, --steps, --every must be >= 1, --residuals >= 2 and --dt > 0")
    m, tok = setup_model(model, threads, device, dtype, seq_len=seq_len, layers=layers, ov_norm=ov_norm)
    ids = corpus_windows(tok, "heldout", tokens, seq_len)
    rows: list[dict] = []
    for ell in ells:
        rows += _layer_rows(m, ell, tracks, al, fa, ids, residuals, seed, steps, dt, every, ov_norm)
    meta = run_meta(m, layers=ells, tracks=tracks, alphas=al, flow_alphas=fa, residuals=residuals, steps=steps,
                    dt=dt, every=every, tokens=int(ids.numel()), seq_len=seq_len, seed=seed, ov_norm=ov_norm)
    write_rows(rows, meta, out, csv)
    emit({"meta": meta, "rows": rows} if as_json else [r for r in rows if r["table"] == "branch"], as_json,
         table_title="Thm 3 first-order branch")
