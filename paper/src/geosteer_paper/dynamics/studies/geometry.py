"""``geosteer study dynamics critical | commutator | pressure | gain-depth | split-options``:
reduced-field critical geometry, the tangential commutator vs reordering error, diversity under aggregation
pressure, FFN gain by depth, the FFN split choices. Tidy records via ``--out`` (.json/.csv) / ``--csv``;
docs/dynamics.md quotes them."""

from __future__ import annotations

from pathlib import Path

import typer

from geosteer.cli.common import DEVICE_OPT, DTYPE_OPT, JSON_OPT, MODEL_OPT, THREADS_OPT, emit
from geosteer_paper.dynamics.studies.common import (
    CSV_OPT,
    OUT_OPT,
    check_choices,
    check_finite,
    parse_floats,
    run_meta,
    setup_model,
    write_rows,
    write_summary,
)

BOS_OPT = typer.Option(False, "--with-bos/--no-bos", help="include position 0 (BOS) in seeds and statistics")


def _layers(model, spec: str, default: str | None = None) -> list[int]:
    from geosteer.models.anatomy import anatomy, parse_layers

    an = anatomy(model)
    return an.check_layers(parse_layers(default if spec is None else spec, an.n_layers))


def critical(model: str = MODEL_OPT,
             layers: str = typer.Option(..., "--layers", help="layers, e.g. 5,15,25"),
             fields: str = typer.Option("ov,ffn,full", "--fields", help="any of ov, ffn, full"),
             alpha: float = typer.Option(1.0, "--alpha", help="FFN gain α of the full field (>= 0)"),
             real: int = typer.Option(32, "--real", min=0, help="seeds from real residual directions"),
             random: int = typer.Option(32, "--random", min=0, help="Gaussian random seeds"),
             seed: int = typer.Option(0, "--seed"),
             threshold: float = typer.Option(0.05, "--threshold", help="zero score ‖g‖/(‖F‖+ε) to keep"),
             steps: int = typer.Option(1500, "--steps", help="Adam steps of the search"),
             lr: float = typer.Option(0.05, "--lr"),
             refine_iters: int = typer.Option(4, "--refine-iters", min=0,
                                              help="Newton charts (fresh Jacobians; 0: none)"),
             ov_norm: str = typer.Option("gain", "--ov-norm", help="fold the attention pre-norm gain: gain|none"),
             with_bos: bool = BOS_OPT,
             tokens: int = typer.Option(512, "--tokens", help="held-out tokens to draw residual seeds from"),
             seq_len: int = typer.Option(256, "--context"),
             directions: bool = typer.Option(False, "--directions", help="keep each root's unit vector (JSON)"),
             as_json: bool = JSON_OPT, out: Path | None = OUT_OPT, csv: Path | None = CSV_OPT,
             threads: int = THREADS_OPT,
             device: str = DEVICE_OPT, dtype: str = DTYPE_OPT) -> None:
    """Critical candidates of the reduced fields P_uVu, P_uΦ(u), P_u(Vu+αΦ(u)): A/S/R labels (paper Table 2)."""
    from geosteer.dynamics.diagnostics import corpus_windows
    from geosteer_paper.dynamics.critical import check_threshold, critical_study
    from geosteer_paper.dynamics.fields import check_field

    kinds = [check_field(f.strip()) for f in fields.split(",") if f.strip()]
    check_threshold(threshold)
    check_finite(alpha, "--alpha", 0.0)
    if real + random < 1:
        raise ValueError("--real and --random are both 0: give at least one seed direction")
    m, tok = setup_model(model, threads, device, dtype, seq_len=seq_len, layers=layers, ov_norm=ov_norm)
    chosen = _layers(m, layers)
    ids = corpus_windows(tok, "heldout", tokens, seq_len) if real else None
    cand, summ = critical_study(m, ids, chosen, kinds, alpha=alpha, n_real=real, n_random=random, seed=seed,
                                with_bos=with_bos, ov_norm=ov_norm, threshold=threshold, steps=steps, lr=lr,
                                refine_iters=refine_iters, log=lambda s: typer.echo(s, err=True))
    if not directions:
        for c in cand:
            c.pop("u", None)
    rows = [{"table": "summary", **s} for s in summ] + [{"table": "candidate", **c} for c in cand]
    meta = run_meta(m, layers=chosen, fields=kinds, alpha=alpha, real=real, random=random, seed=seed,
                 threshold=threshold, steps=steps, lr=lr, refine_iters=refine_iters, ov_norm=ov_norm,
                 with_bos=with_bos, tokens=tokens, seq_len=seq_len)
    write_rows(rows, meta, out, csv)
    table = [{k: s.get(k) for k in ("layer", "field", "stage", "n", "A", "S", "R", "s_fraction")} for s in summ]
    emit({"meta": meta, "summary": summ} if as_json else table, as_json, table_title="critical candidates A/S/R")


def commutator(model: str = MODEL_OPT, layers: str = typer.Option("all", "--layers"),
               tokens: int = typer.Option(512, "--tokens"), seq_len: int = typer.Option(128, "--context"),
               h: float = typer.Option(1e-2, "--h", help="central-difference step of the attention half"),
               with_bos: bool = BOS_OPT, as_json: bool = JSON_OPT, out: Path | None = OUT_OPT,
               csv: Path | None = CSV_OPT, threads: int = THREADS_OPT,
               device: str = DEVICE_OPT, dtype: str = DTYPE_OPT) -> None:
    """Tangential commutator C (both halves, App. B) vs the measured reordering angular error (Fig. 8 right)."""
    from geosteer.dynamics.diagnostics import corpus_windows
    from geosteer_paper.dynamics.commutator import reorder_study

    check_finite(h, "--h", 1e-12)
    m, tok = setup_model(model, threads, device, dtype, seq_len=seq_len, layers=layers)
    chosen = _layers(m, layers, "all")
    ids = corpus_windows(tok, "heldout", tokens, seq_len)
    rows, summ = reorder_study(m, ids, chosen, h=h, with_bos=with_bos)
    meta = run_meta(m, tokens=int(ids.numel()), seq_len=seq_len, h=h, with_bos=with_bos, **summ[0])
    write_rows([{"table": "layers", **r} for r in rows] + [{"table": "summary", **s} for s in summ], meta, out, csv)
    emit({"meta": meta, "layers": rows} if as_json else rows, as_json, table_title="commutator vs reordering")
    if not as_json:
        emit(summ[0], False)


def pressure(model: str = MODEL_OPT, betas: str = typer.Option("1,2,4", "--betas", help="β_A values (> 0)"),
             layers: str = typer.Option("all", "--layers", help="layers under pressure (and FFN variant)"),
             variants: str = typer.Option("full,tangential,radial,zero", "--variants"),
             tokens: int = typer.Option(1024, "--tokens"), seq_len: int = typer.Option(256, "--context"),
             batch_size: int = typer.Option(4, "--batch-size"), with_bos: bool = BOS_OPT,
             mode: str = typer.Option("temperature", "--mode",
                                      help="β_A scales the attention logits (temperature) or the update A (gain)"),
             as_json: bool = JSON_OPT, out: Path | None = OUT_OPT, csv: Path | None = CSV_OPT,
             threads: int = THREADS_OPT,
             device: str = DEVICE_OPT, dtype: str = DTYPE_OPT) -> None:
    """Diversity D after every block under attention inverse temperature β_A, per FFN variant (experiment 3)."""
    from geosteer.dynamics.diagnostics import corpus_windows
    from geosteer_paper.dynamics.pressure import PRESSURE_MODES, PRESSURE_VARIANTS, check_beta, pressure_study

    bs = [check_beta(b) for b in parse_floats(betas, "--betas")]
    vs = check_choices(variants, PRESSURE_VARIANTS, "FFN variant")
    check_choices(mode, PRESSURE_MODES, "pressure mode")
    m, tok = setup_model(model, threads, device, dtype, seq_len=seq_len, layers=layers)
    chosen = _layers(m, layers, "all")
    ids = corpus_windows(tok, "heldout", tokens, seq_len)
    rows, summ = pressure_study(m, ids, bs, chosen, vs, batch_size=batch_size, with_bos=with_bos, mode=mode,
                                log=lambda s: typer.echo(s, err=True))
    meta = run_meta(m, tokens=int(ids.numel()), seq_len=seq_len, layers=chosen, with_bos=with_bos, mode=mode)
    write_summary(summ, {"layers": rows}, meta, out, csv, as_json, "diversity under pressure")


def gain_depth(model: str = MODEL_OPT,
               depths: str = typer.Option(",".join(f"{i / 16:g}" for i in range(17)), "--depths",
                                          help="depth fractions ℓ/L in [0, 1]"),
               values: str = typer.Option("0,0.5,1.5,2", "--values", help="FFN gains α_F"),
               tokens: int = typer.Option(1024, "--tokens"), seq_len: int = typer.Option(256, "--context"),
               batch_size: int = typer.Option(4, "--batch-size"), as_json: bool = JSON_OPT,
               out: Path | None = OUT_OPT, csv: Path | None = CSV_OPT, threads: int = THREADS_OPT,
               device: str = DEVICE_OPT, dtype: str = DTYPE_OPT) -> None:
    """FFN gain α_F at one layer at depth ℓ/L, attention fixed (App. C.1, Fig. 8 left): loss increase."""
    from geosteer.dynamics.diagnostics import corpus_windows
    from geosteer_paper.dynamics.pressure import depth_layers, gain_depth_sweep

    ds = parse_floats(depths, "--depths")
    vs = [check_finite(v, "--values") for v in parse_floats(values, "--values")]
    depth_layers(2, ds)  # the depths themselves (fractions in [0, 1]) before the model loads
    m, tok = setup_model(model, threads, device, dtype, seq_len=seq_len)
    from geosteer import anatomy

    depth_layers(anatomy(m).n_layers, ds)  # validate before any forward
    ids = corpus_windows(tok, "heldout", tokens, seq_len)
    rows = gain_depth_sweep(m, ids, ds, vs, batch_size=batch_size, log=lambda s: typer.echo(s, err=True))
    meta = run_meta(m, tokens=int(ids.numel()), seq_len=seq_len)
    write_rows(rows, meta, out, csv)
    emit(rows, as_json, table_title="FFN gain by depth")


def split_options(model: str = MODEL_OPT, layers: str = typer.Option("all", "--layers"),
                  variants: str = typer.Option("tangential,radial", "--variants"),
                  references: str = typer.Option("read,input", "--references",
                                                 help="read = unit(x + A) (default split), input = unit(x)"),
                  tokens: int = typer.Option(1024, "--tokens"), seq_len: int = typer.Option(256, "--context"),
                  batch_size: int = typer.Option(4, "--batch-size"), as_json: bool = JSON_OPT,
                  out: Path | None = OUT_OPT, csv: Path | None = CSV_OPT, threads: int = THREADS_OPT,
                  device: str = DEVICE_OPT, dtype: str = DTYPE_OPT) -> None:
    """FFN radial/tangential ablation under each split reference, with BOS ablated or kept (paper Fig. 3 robustness)."""
    from geosteer.dynamics.config import check_variant
    from geosteer.dynamics.diagnostics import corpus_windows
    from geosteer.dynamics.variants import REFERENCES
    from geosteer.errors import GeosteerError
    from geosteer_paper.dynamics.options import split_options_study

    vs = [check_variant(v.strip()) for v in variants.split(",") if v.strip()]
    refs = [r.strip() for r in references.split(",") if r.strip()]
    bad = [r for r in refs if r not in REFERENCES]
    if bad:
        raise GeosteerError(f"unknown reference '{bad[0]}'; valid: {', '.join(REFERENCES)}")
    m, tok = setup_model(model, threads, device, dtype, seq_len=seq_len, layers=layers)
    chosen = _layers(m, layers, "all")
    ids = corpus_windows(tok, "heldout", tokens, seq_len)
    rows = split_options_study(m, ids, chosen, vs, refs, batch_size=batch_size,
                               log=lambda s: typer.echo(s, err=True))
    write_rows(rows, run_meta(m, tokens=int(ids.numel()), seq_len=seq_len, layers=chosen), out, csv)
    emit(rows, as_json, table_title="FFN split options")
