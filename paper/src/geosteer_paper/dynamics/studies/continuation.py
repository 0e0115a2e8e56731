"""``geosteer study dynamics continuation | basins | phase``: critical candidates of g_α tracked as α goes
0 → 1 (paper Fig. 11) and basin maps of the flow of g_α on a PCA slice of the sphere, α = 0 vs 1 (Fig. 12).
Tidy records via ``--out`` (.json/.csv) / ``--csv``; ``--html`` writes the basin figure."""

from __future__ import annotations

from pathlib import Path

import typer

from geosteer.cli.common import DEVICE_OPT, DTYPE_OPT, JSON_OPT, MODEL_OPT, THREADS_OPT, emit, model_config
from geosteer.cli.outputs import HTML, out_file
from geosteer_paper.dynamics.studies.common import (
    CSV_OPT,
    OUT_OPT,
    check_finite,
    parse_floats,
    parse_ints,
    run_meta,
    setup_model,
    write_rows,
)

MAX_BASIN_GRID = 400  # grid points per axis at most (the flow is integrated from grid^2 starting points)
NORM_OPT = typer.Option("gain", "--ov-norm", help="fold the attention pre-norm gain: gain|none")


def _layer(model, layer: int) -> int:
    from geosteer.models.anatomy import anatomy, parse_layers

    an = anatomy(model)
    return an.check_layers(parse_layers(str(layer), an.n_layers))[0]


def continuation(model: str = MODEL_OPT, layer: int = typer.Option(..., "--layer", help="one layer"),
                 tracks: int = typer.Option(4, "--tracks", help="zeros of g_0 (top real eigenvectors of V) to track"),
                 steps: int = typer.Option(10, "--steps", help="α steps from 0 to 1 (>= 1)"),
                 refine_iters: int = typer.Option(6, "--refine-iters", help="Newton charts per α step"),
                 ov_norm: str = NORM_OPT, html: Path | None = typer.Option(None, "--html", help="write the figure",
                                                   callback=out_file(*HTML)),
                 directions: bool = typer.Option(False, "--directions",
                                                                          help="keep each point's unit vector"),
                 as_json: bool = JSON_OPT, out: Path | None = OUT_OPT, csv: Path | None = CSV_OPT,
                 threads: int = THREADS_OPT,
                 device: str = DEVICE_OPT, dtype: str = DTYPE_OPT) -> None:
    """Track critical points of g_α = P_u(Vu + αΦ(u)) from α = 0 to 1: max Re, saddle index, max |Im| (Fig. 11)."""
    from geosteer_paper.dynamics.continuation import check_steps, continue_alpha, ov_start_points
    from geosteer_paper.dynamics.fields import layer_fields

    check_steps(steps, "--steps")
    check_steps(tracks, "--tracks")
    m, _ = setup_model(model, threads, device, dtype, layer=layer, ov_norm=ov_norm)
    ell = _layer(m, layer)
    full = layer_fields(m, ell, ("full",), ov_norm=ov_norm)["full"]
    rows = continue_alpha(full.V, full.phi, ov_start_points(full.V, tracks), steps, refine_iters=refine_iters)
    for r in rows:
        r["layer"] = ell
        if not directions:
            r.pop("u")
    meta = run_meta(m, layer=ell, tracks=tracks, steps=steps, refine_iters=refine_iters, ov_norm=ov_norm)
    write_rows(rows, meta, out, csv)
    if html is not None:
        from geosteer.io_utils import atomic_write_text
        from geosteer_paper.dynamics.continuation import continuation_figure

        atomic_write_text(html, continuation_figure(rows).to_html(include_plotlyjs="cdn"))
    keys = ("track", "alpha", "score", "label", "max_real", "saddle_index", "max_abs_imag", "converged")
    emit({"meta": meta, "rows": rows} if as_json else [{k: r[k] for k in keys} for r in rows], as_json,
         table_title="α continuation")


def basins(model: str = MODEL_OPT, layer: int = typer.Option(..., "--layer", help="one layer"),
           alphas: str = typer.Option("0,1", "--alphas", help="FFN gains α of the fields compared"),
           grid: int = typer.Option(15, "--grid", max=MAX_BASIN_GRID, help="grid points per axis (>= 2)"),
           span: float = typer.Option(1.0, "--span", help="a, b in [-span, span] (unit PCA directions)"),
           steps: int = typer.Option(200, "--steps", help="integration steps"),
           dt: float = typer.Option(0.1, "--dt", help="step in units of 1/median‖F‖ over the grid"),
           method: str = typer.Option("rk4", "--method", help="euler|rk4"),
           cluster_deg: float = typer.Option(5.0, "--cluster-deg", help="end points within this angle: one basin"),
           tokens: int = typer.Option(512, "--tokens", help="held-out tokens for the PCA plane"),
           seq_len: int = typer.Option(256, "--context"), seed: int = typer.Option(0, "--seed"),
           residuals: int = typer.Option(256, "--residuals", help="residual directions drawn for the PCA"),
           ov_norm: str = NORM_OPT, html: Path | None = typer.Option(None, "--html", help="write the figure",
                                                   callback=out_file(*HTML)),
           as_json: bool = JSON_OPT, out: Path | None = OUT_OPT, csv: Path | None = CSV_OPT,
           threads: int = THREADS_OPT,
           device: str = DEVICE_OPT, dtype: str = DTYPE_OPT) -> None:
    """Basins of the flow of g_α on the sphere slice unit(m + a e1 + b e2) of real residuals (Fig. 12)."""
    from geosteer.dynamics.diagnostics import corpus_windows
    from geosteer_paper.dynamics.continuation import (
        basin_figure,
        basin_map,
        check_grid,
        check_method,
        check_steps,
        pca_plane,
    )
    from geosteer_paper.dynamics.critical import residual_seeds
    from geosteer_paper.dynamics.fields import ReducedField, layer_fields

    al = [check_finite(a, "--alphas", 0.0) for a in parse_floats(alphas, "--alphas")]
    check_grid(grid)
    check_steps(steps, "--steps")
    check_method(method)
    check_finite(span, "--span", 1e-12)
    check_finite(dt, "--dt", 1e-12)
    m, tok = setup_model(model, threads, device, dtype, seq_len=seq_len, layer=layer, ov_norm=ov_norm)
    ell = _layer(m, layer)
    full = layer_fields(m, ell, ("full",), ov_norm=ov_norm)["full"]
    ids = corpus_windows(tok, "heldout", tokens, seq_len)
    plane = pca_plane(residual_seeds(m, ids, ell, residuals, seed))
    fields = {a: ReducedField("full", V=full.V, phi=full.phi, alpha=a) for a in al}
    pts, clus = basin_map(fields, plane, grid, span, steps=steps, dt=dt, method=method, cluster_deg=cluster_deg)
    meta = run_meta(m, layer=ell, alphas=al, grid=grid, span=span, steps=steps, dt=dt, method=method,
                 cluster_deg=cluster_deg, tokens=int(ids.numel()), seq_len=seq_len, residuals=residuals,
                 seed=seed, ov_norm=ov_norm)
    write_rows([{"table": "clusters", "layer": ell, **c} for c in clus] +
           [{"table": "points", "layer": ell, **p} for p in pts], meta, out, csv)
    if html is not None:
        from geosteer.io_utils import atomic_write_text

        atomic_write_text(html, basin_figure(pts).to_html(include_plotlyjs="cdn"))
    emit({"meta": meta, "clusters": clus} if as_json else clus, as_json, table_title="basins (end clusters)")


def phase(model: str = MODEL_OPT, layer: int = typer.Option(..., "--layer", help="one layer"),
          dims: str = typer.Option("2,3", "--dims", help="PCA subspace dimensions k (>= 1)"),
          samples: int = typer.Option(256, "--samples", help="real tokens sampled"),
          tokens: int = typer.Option(512, "--tokens"), seq_len: int = typer.Option(256, "--context"),
          seed: int = typer.Option(0, "--seed"),
          with_bos: bool = typer.Option(False, "--with-bos/--no-bos", help="include position 0 (BOS)"),
          as_json: bool = JSON_OPT, out: Path | None = OUT_OPT, csv: Path | None = CSV_OPT,
          threads: int = THREADS_OPT,
          device: str = DEVICE_OPT, dtype: str = DTYPE_OPT) -> None:
    """Empirical field of real block updates in PCA subspaces: inward scores, local linear spectra (Fig. 9)."""
    from geosteer.dynamics.diagnostics import corpus_windows
    from geosteer.errors import GeosteerError
    from geosteer_paper.dynamics.continuation import phase_reconstruction, real_updates

    ks = parse_ints(dims, "--dims")
    if not ks or min(ks) < 1:
        raise GeosteerError(f"--dims must be integers >= 1 (got '{dims}')")
    if samples < 3:
        raise GeosteerError(f"--samples must be >= 3 (got {samples})")
    width = getattr(model_config(model), "hidden_size", None) if model_config(model) is not None else None
    if isinstance(width, int) and max(ks) >= width:
        raise GeosteerError(f"--dims {max(ks)}: PCA subspaces of the residual stream need k in [1, {width - 1}] "
                            f"(d_model {width})")
    m, tok = setup_model(model, threads, device, dtype, seq_len=seq_len, layer=layer)
    ell = _layer(m, layer)
    ids = corpus_windows(tok, "heldout", tokens, seq_len)
    u, g = real_updates(m, ids, ell, samples, seed, with_bos)
    rows = []
    for k in ks:
        rec = phase_reconstruction(u, g, k)
        rec.pop("J")
        rows.append({"layer": ell, **rec})
    meta = run_meta(m, layer=ell, dims=ks, samples=samples, tokens=int(ids.numel()), seq_len=seq_len, seed=seed,
                 with_bos=with_bos)
    write_rows(rows, meta, out, csv)
    emit({"meta": meta, "rows": rows} if as_json else rows, as_json, table_title="phase reconstruction")
