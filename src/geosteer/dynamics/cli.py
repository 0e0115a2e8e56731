"""The tool verbs of the FFN steering field: ``geosteer measure diagnose`` (per-layer diagnostics) and
``geosteer learn gates`` (learned FFN gates).

Each writes tidy records (JSON/CSV); the paper experiments are the method's studies, run as
``geosteer study dynamics <name>``.
"""

from __future__ import annotations

import time
from pathlib import Path

import typer

from geosteer.cli.common import (
    DEVICE_OPT,
    DTYPE_OPT,
    JSON_OPT,
    MODEL_OPT,
    THREADS_OPT,
    check_layers,
    check_positions,
    emit,
    load,
)
from geosteer.cli.learning import SEED_OPT, batch_size_opt, context_opt, layers_opt, lr_opt, out_opt
from geosteer.cli.outputs import out_file, out_records

EVAL_BATCH = 4  # held-out windows per forward when gates are evaluated
RECORDS_HELP = "write tidy records (.json or .csv)"


def run_meta(m, **kw) -> dict:
    """A run's metadata: model id, torch version and threads, then ``kw``."""
    import torch

    from geosteer.models.loading import model_id

    return {"model": model_id(m), "torch": torch.__version__, "threads": torch.get_num_threads(), **kw}


def write_rows(rows: list[dict], meta: dict, *paths: Path | None) -> None:
    """Write the tidy records to each path given (``.json``: rows + meta; ``.csv``: rows)."""
    from geosteer.io_utils import write_records

    for path in paths:
        if path is not None:
            write_records(path, rows, meta)


def _topk_list(spec: str) -> list[int]:
    from geosteer.dynamics.config import check_k

    try:
        ks = [int(s) for s in spec.split(",") if s.strip()]
    except ValueError:
        ks = []
    if not ks:
        raise ValueError(f"bad --topk '{spec}': comma-separated integers, e.g. 1,4,16")
    return [check_k(k) for k in ks]


def diagnose_cmd(model: str = MODEL_OPT,
                 tokens: int = typer.Option(2048, "--tokens", "-n", help="held-out tokens (cut into --context "
                                            "windows)"),
                 seq_len: int = typer.Option(256, "--context", help="window length in tokens (BOS first)"),
                 batch_size: int = typer.Option(4, "--batch-size", help="windows per forward"),
                 split: str = typer.Option("heldout", "--split", help="corpus split: heldout | train"),
                 topk: str = typer.Option("", "--topk", help="also run top-k for k, e.g. 1,4,16,32"),
                 ov: bool = typer.Option(True, "--ov/--no-ov", help="weight-only OV non-symmetry"),
                 as_json: bool = JSON_OPT,
                 out: Path | None = typer.Option(None, "--out", "-o", help=RECORDS_HELP, callback=out_records()),
                 csv: Path | None = typer.Option(None, "--csv", help="write tidy records as CSV",
                                                 callback=out_file(".csv")),
                 threads: int = THREADS_OPT, device: str = DEVICE_OPT, dtype: str = DTYPE_OPT) -> None:
    """FFN steering-field diagnostics per layer in one forward pass (angular deficit, tangential fraction,
    defect, commutator, diversity), with optional top-k and OV tables."""
    from geosteer.data.corpus import SPLITS
    from geosteer.dynamics.config import DiagnoseConfig
    from geosteer.dynamics.diagnostics import corpus_windows, diagnose, wide

    ks = _topk_list(topk) if topk else []
    if split not in SPLITS:
        raise ValueError(f"unknown corpus split (--split) '{split}'; valid: {', '.join(SPLITS)}")
    cfg = DiagnoseConfig(split=split, tokens=tokens, seq_len=seq_len, batch_size=batch_size)
    check_positions(model, "--context", seq_len)
    m, tok = load(model, threads=threads, device=device, dtype=dtype)
    ids = corpus_windows(tok, cfg.split, cfg.tokens, cfg.seq_len)
    t0 = time.perf_counter()
    rows = [{"table": "layers", **r} for r in diagnose(m, ids, batch_size=cfg.batch_size, eps=cfg.eps)]
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
        return
    cols = ("layer", "deficit", "cos_gap", "ffn_tangential_frac", "defect", "commutator", "ddiv_attn",
            "ddiv_ffn", "norm_cv")
    emit([{c: r[c] for c in cols} for r in layer_wide], False, table_title=f"dynamics: {meta['model']}")
    for k, v in summary.items():
        emit(v, False, table_title=k) if isinstance(v, list) else emit({k: v}, False)


def gates_cmd(model: str = MODEL_OPT,
              out: Path = out_opt("geosteer-gates", state=False, what="gate artifact folder"),
              layers: str = layers_opt("all"),
              tokens: int = typer.Option(65536, "--tokens", min=1, help="training tokens (train split)"),
              seq_len: int = context_opt(128),
              batch: int = batch_size_opt(8),
              lr: float = lr_opt(2e-2),
              seed: int = SEED_OPT,
              eval_tokens: int = typer.Option(2048, "--eval-tokens", min=1, help="held-out tokens for ΔL vs α = 1"),
              eval_context: int = typer.Option(256, "--eval-context", min=1,
                                               help="held-out window length in tokens (BOS first)"),
              records: Path | None = typer.Option(None, "--records", help="also write the gates and ΔL as tidy "
                                                  "records (.json or .csv)", callback=out_records()),
              as_json: bool = JSON_OPT, threads: int = THREADS_OPT,
              device: str = DEVICE_OPT, dtype: str = DTYPE_OPT) -> None:
    """Learn scalar FFN gates α_ℓ (one per layer, the only trainable parameters) on the train split; report
    them and the held-out loss change against α = 1. Apply them with --set gates=DIR."""
    from geosteer.dynamics.diagnostics import corpus_windows
    from geosteer.dynamics.gates import train_gates
    from geosteer.dynamics.parallel import mean_loss
    from geosteer.models.anatomy import anatomy, parse_layers
    from geosteer.train import TrainConfig

    check_positions(model, "--context", seq_len)
    check_positions(model, "--eval-context", eval_context)
    check_layers(model, "--layers", layers)
    m, tok = load(model, threads=threads, device=device, dtype=dtype)
    cfg = TrainConfig(lr=lr, tokens=tokens, batch_size=batch, seq_len=seq_len, seed=seed,
                      eval_before_after=False, checkpoint_every=0)
    g, info = train_gates(m, tok, cfg, layers=parse_layers(layers, anatomy(m).n_layers), log=None)
    ids = corpus_windows(tok, "heldout", eval_tokens, eval_context)
    base = mean_loss(m, ids, EVAL_BATCH)
    loss = mean_loss(m, ids, EVAL_BATCH, (g,))
    summary = {**g.summary(), "loss_gates": loss, "loss_alpha1": base, "delta_loss": loss - base,
               "eval_tokens": int(ids.numel())}
    hist = info.get("history", [])
    g.save(out, extra={"train": {"tokens": info.get("tokens_seen"), "lr": lr, "seed": seed,
                                 "final_loss": hist[-1]["loss"] if hist else None}, "eval": summary})
    rows = [{"table": "gates", **r} for r in g.table()] + [{"table": "summary", **summary}]
    write_rows(rows, run_meta(m, train_tokens=tokens, lr=lr, seed=seed), records)
    if as_json:
        emit({"out": str(out), "gates": g.table(), "summary": summary}, True)
    else:
        emit(g.table(), False, table_title="FFN gates")
        emit({"out": str(out), **summary}, False)
