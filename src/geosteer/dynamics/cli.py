"""``geosteer dynamics ...``: the tool verbs: per-layer diagnostics and learned FFN gates.

Each verb writes tidy records (JSON/CSV via ``--out``/``--csv``); the paper experiments are the method's
studies (:mod:`geosteer.dynamics.studies`), run as ``geosteer study dynamics <name>``.
"""

from __future__ import annotations

import time
from pathlib import Path

import typer

from geosteer.cli.common import DEVICE_OPT, DTYPE_OPT, JSON_OPT, MODEL_OPT, THREADS_OPT, check_positions, emit
from geosteer.cli.outputs import out_artifact
from geosteer.dynamics.studies.common import (
    BATCH_OPT,
    CSV_OPT,
    OUT_OPT,
    SEQ_OPT,
    TOKENS_OPT,
    check_choices,
    parse_ints,
    run_meta,
    setup_model,
    write_rows,
)
from geosteer.models.anatomy import anatomy, parse_layers

dyn = typer.Typer(no_args_is_help=True, help="FFN steering field: residual dynamics on the sphere.")


@dyn.command()
def diagnose(model: str = MODEL_OPT, tokens: int = TOKENS_OPT,
             seq_len: int = SEQ_OPT, batch_size: int = BATCH_OPT,
             split: str = typer.Option("heldout", "--split"),
             topk: str = typer.Option("", "--topk", help="also run top-k for k, e.g. 1,4,16,32"),
             ov: bool = typer.Option(True, "--ov/--no-ov", help="weight-only OV non-symmetry"),
             as_json: bool = JSON_OPT, out: Path | None = OUT_OPT, csv: Path | None = CSV_OPT,
             threads: int = THREADS_OPT,
             device: str = DEVICE_OPT, dtype: str = DTYPE_OPT) -> None:
    """Per-layer diagnostics in one forward pass (+ optional top-k and OV tables)."""
    from geosteer.data.corpus import SPLITS
    from geosteer.dynamics.config import DiagnoseConfig, check_k
    from geosteer.dynamics.diagnostics import corpus_windows, wide
    from geosteer.dynamics.diagnostics import diagnose as run

    ks = [check_k(k) for k in parse_ints(topk, "--topk")] if topk else []
    check_choices(split, SPLITS, "corpus split (--split)")
    cfg = DiagnoseConfig(split=split, tokens=tokens, seq_len=seq_len, batch_size=batch_size)
    m, tok = setup_model(model, threads, device, dtype, seq_len=seq_len)
    ids = corpus_windows(tok, cfg.split, cfg.tokens, cfg.seq_len)
    t0 = time.perf_counter()
    rows = [{"table": "layers", **r} for r in run(m, ids, batch_size=cfg.batch_size, eps=cfg.eps)]
    meta = run_meta(m, split=split, tokens=int(ids.numel()), seq_len=seq_len, seconds=time.perf_counter() - t0)
    summary: dict = {}
    if ks:
        from geosteer.dynamics.topk import topk_study

        layer_rows, ksum = topk_study(m, ids, ks, batch_size=cfg.batch_size)
        rows += [{"table": "topk_layers", **r} for r in layer_rows] + [{"table": "topk", **r} for r in ksum]
        summary["topk"] = ksum
    if ov:
        from geosteer.dynamics.ov import ov_rows, ov_summary

        orows = ov_rows(m)
        rows += [{"table": "ov", **r} for r in orows]
        summary["ov"] = ov_summary(orows)
    write_rows(rows, {**meta, **summary}, out, csv)
    layer_wide = wide([r for r in rows if r["table"] == "layers"])
    if as_json:
        emit({"meta": meta, "layers": layer_wide, **summary}, True)
    else:
        cols = ("layer", "deficit", "cos_gap", "ffn_tangential_frac", "defect", "commutator", "ddiv_attn",
                "ddiv_ffn", "norm_cv")
        emit([{c: r[c] for c in cols} for r in layer_wide], False, table_title=f"dynamics: {meta['model']}")
        for k, v in summary.items():
            emit(v, False, table_title=k) if isinstance(v, list) else emit({k: v}, False)


@dyn.command()
def gates(model: str = MODEL_OPT,
          save: Path | None = typer.Option(None, "--save", help="train and save the gate artifact here",
                                            callback=out_artifact("geosteer-gates")),
          load: Path | None = typer.Option(None, "--load", help="evaluate a saved gate artifact"),
          train_tokens: int = typer.Option(65536, "--train-tokens", min=1), lr: float = typer.Option(2e-2, "--lr"),
          train_batch: int = typer.Option(8, "--train-batch"),
          train_seq: int = typer.Option(128, "--train-seq"),
          seed: int = typer.Option(0, "--seed"), layers: str = typer.Option("all", "--layers"),
          tokens: int = TOKENS_OPT, seq_len: int = SEQ_OPT, batch_size: int = BATCH_OPT,
          as_json: bool = JSON_OPT, out: Path | None = OUT_OPT, csv: Path | None = CSV_OPT,
          threads: int = THREADS_OPT,
          device: str = DEVICE_OPT, dtype: str = DTYPE_OPT) -> None:
    """Learn scalar FFN gates α_ℓ on the train split (or load them); report them and ΔL vs α = 1."""
    from geosteer.dynamics.diagnostics import corpus_windows
    from geosteer.dynamics.gates import load_gates, train_gates
    from geosteer.dynamics.parallel import mean_loss
    from geosteer.errors import GeosteerError

    if (save is None) == (load is None):
        raise GeosteerError("give exactly one of --save DIR (train) or --load DIR (evaluate)")
    if save is not None:
        check_positions(model, "--train-seq", train_seq)
    else:
        load_gates(load)  # a missing or damaged artifact is refused before the model loads
    m, tok = setup_model(model, threads, device, dtype, seq_len=seq_len, layers=layers)
    info: dict = {}
    if load is not None:
        g = load_gates(load, m)
    else:
        from geosteer.train import TrainConfig

        cfg = TrainConfig(lr=lr, tokens=train_tokens, batch_size=train_batch, seq_len=train_seq, seed=seed,
                          eval_before_after=False, checkpoint_every=0)
        g, info = train_gates(m, tok, cfg, layers=parse_layers(layers, anatomy(m).n_layers), log=None)
    ids = corpus_windows(tok, "heldout", tokens, seq_len)
    base = mean_loss(m, ids, batch_size)
    loss = mean_loss(m, ids, batch_size, (g,))
    summary = {**g.summary(), "loss_gates": loss, "loss_alpha1": base, "delta_loss": loss - base,
               "eval_tokens": int(ids.numel())}
    if save is not None:
        hist = info.get("history", [])
        g.save(save, extra={"train": {"tokens": info.get("tokens_seen"), "lr": lr, "seed": seed,
                                      "final_loss": hist[-1]["loss"] if hist else None}, "eval": summary})
    rows = [{"table": "gates", **r} for r in g.table()] + [{"table": "summary", **summary}]
    write_rows(rows, run_meta(m, train_tokens=train_tokens, lr=lr, seed=seed), out, csv)
    if as_json:
        emit({"gates": g.table(), "summary": summary}, True)
    else:
        emit(g.table(), False, table_title="FFN gates")
        emit(summary, False)
