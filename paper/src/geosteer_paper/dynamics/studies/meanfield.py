"""``geosteer study dynamics mean-field``: Thm 2's mean-field limit checked on a real layer's bidirectional
attention (tables ``draws`` and ``summary`` in one tidy file via ``--out``)."""

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


def summary_rows(draws: list[dict], layer: int, alpha: float) -> list[dict]:
    """Per layer, α and recorded time t: log-log slopes of mean W₁ over L at 0 and at t (all L, and the three
    largest: ``_tail``), and the mean amplification W₁(t)/W₁(0) at the smallest and the largest L."""
    import numpy as np

    from geosteer_paper.dynamics.meanfield import loglog_fit

    sizes = sorted({r["particles"] for r in draws})
    out = []
    for t in sorted({r["time"] for r in draws}):
        at = [r for r in draws if r["time"] == t]

        def amp(n: int, at=at) -> float:
            return float(np.mean([r["ratio"] for r in at if r["particles"] == n]))

        out.append({"table": "summary", "layer": layer, "alpha": alpha, "time": t,
                    "slope_w1_0": loglog_fit(at, "w1_0"), "slope_w1_t": loglog_fit(at, "w1_t"),
                    "slope_w1_t_tail": loglog_fit(at, "w1_t", sizes[-3:]),
                    "amp_smallest": amp(sizes[0]), "amp_largest": amp(sizes[-1]),
                    "amp_max": max(r["ratio"] for r in at), "median_move_deg": at[0]["median_move_deg"],
                    "smallest": sizes[0], "largest": sizes[-1]})
    return out


def mean_field(model: str = MODEL_OPT, layers: str = typer.Option("5,15", "--layers", help="comma-separated layers"),
               alphas: str = typer.Option("0,1", "--alphas", help="FFN gains α of the flow (0: attention only)"),
               atoms: int = typer.Option(64, "--atoms", help="real residual directions: the atoms of μ_0"),
               sizes: str = typer.Option("16,256,4096,65536,1048576", "--sizes",
                                         help="particle counts L (the cost does not grow with L: the particles "
                                              "sit on the atoms)"),
               repeats: int = typer.Option(16, "--repeats", help="i.i.d. draws of the L particles per L"),
               steps: int = typer.Option(40, "--steps"),
               every: int = typer.Option(10, "--every", help="record W₁ every this many steps"),
               dt: float = typer.Option(0.05, "--dt", help="step, in units of 1 / median ‖F‖ under μ_0"),
               tokens: int = typer.Option(512, "--tokens"), seq_len: int = typer.Option(256, "--context"),
               seed: int = typer.Option(0, "--seed"),
               as_json: bool = JSON_OPT, out: Path | None = OUT_OPT, csv: Path | None = CSV_OPT,
               threads: int = THREADS_OPT, device: str = DEVICE_OPT, dtype: str = DTYPE_OPT) -> None:
    """Thm 2: W₁ of L-particle empirical measures to the mean-field solution, bidirectional attention."""
    from geosteer.dynamics.diagnostics import corpus_windows
    from geosteer.errors import GeosteerError
    from geosteer_paper.dynamics.critical import residual_seeds
    from geosteer_paper.dynamics.meanfield import layer_law, mean_field_rows

    ells = parse_ints(layers, "--layers")
    als = parse_floats(alphas, "--alphas")
    ns = parse_ints(sizes, "--sizes")
    if len(set(ns)) < 2 or min(ns) < 1:
        raise GeosteerError(f"--sizes needs at least two different particle counts >= 1 (got '{sizes}')")
    if atoms < 2 or repeats < 1 or steps < 1 or every < 1 or steps % every or not dt > 0:
        raise GeosteerError("--atoms must be >= 2, --repeats, --steps and --every >= 1 (--every dividing --steps), "
                            "--dt > 0")
    m, tok = setup_model(model, threads, device, dtype, seq_len=seq_len, layers=layers)
    ids = corpus_windows(tok, "heldout", tokens, seq_len)
    rows: list[dict] = []
    for ell in ells:
        x0 = residual_seeds(m, ids, ell, atoms, seed)
        for a in als:
            draws = [{"table": "draws", "layer": ell, "alpha": a, **r}
                     for r in mean_field_rows(layer_law(m, ell, a), x0, ns, repeats, steps, dt, seed, every)]
            rows += draws + summary_rows(draws, ell, a)
            print(rows[-1], flush=True)
    meta = run_meta(m, layers=ells, alphas=als, atoms=atoms, sizes=ns, repeats=repeats, steps=steps, every=every,
                    dt=dt,
                    tokens=int(ids.numel()), seq_len=seq_len, seed=seed, encoding="bos-window")
    write_rows(rows, meta, out, csv)
    emit({"meta": meta, "rows": rows} if as_json else [r for r in rows if r["table"] == "summary"], as_json,
         table_title="Thm 2 mean-field limit")
