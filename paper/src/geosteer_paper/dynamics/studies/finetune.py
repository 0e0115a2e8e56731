"""``geosteer study dynamics finetune-baselines``: the learned FFN gates beside a bias-only fine-tune and a
LoRA on the FFN down projections, each trained by the same loop on the same tokens and scored on the same
held-out windows (one tidy table via ``--out``)."""

from __future__ import annotations

from pathlib import Path

import typer

from geosteer.cli.common import DEVICE_OPT, DTYPE_OPT, JSON_OPT, MODEL_OPT, THREADS_OPT, check_positions, emit
from geosteer_paper.dynamics.studies.common import (
    BATCH_OPT,
    CSV_OPT,
    OUT_OPT,
    SEQ_OPT,
    TOKENS_OPT,
    check_choices,
    check_finite,
    run_meta,
    setup_model,
    write_rows,
)


def finetune_baselines(model: str = MODEL_OPT,
                       methods: str = typer.Option("gates,bias,lora", "--methods", help="gates | bias | lora"),
                       train_tokens: int = typer.Option(24576, "--train-tokens", min=1),
                       train_batch: int = typer.Option(8, "--train-batch", min=1),
                       train_seq: int = typer.Option(128, "--train-seq", min=2),
                       gate_lr: float = typer.Option(2e-2, "--gate-lr"),
                       bias_lr: float = typer.Option(3e-3, "--bias-lr"),
                       lora_lr: float = typer.Option(3e-3, "--lora-lr"),
                       lora_rank: int = typer.Option(1, "--lora-rank", min=1, help="LoRA rank on every down_proj"),
                       seed: int = typer.Option(0, "--seed"),
                       tokens: int = TOKENS_OPT, seq_len: int = SEQ_OPT, batch_size: int = BATCH_OPT,
                       as_json: bool = JSON_OPT, out: Path | None = OUT_OPT, csv: Path | None = CSV_OPT,
                       threads: int = THREADS_OPT, device: str = DEVICE_OPT, dtype: str = DTYPE_OPT) -> None:
    """Gates vs bias-only and LoRA fine-tuning on the same tokens: held-out loss against the stock model."""
    from geosteer.dynamics.diagnostics import corpus_windows
    from geosteer_paper.dynamics.finetune import METHODS, finetune_rows

    chosen = check_choices(methods, METHODS, "method (--methods)")
    chosen = [m for m in METHODS if m in chosen]  # LoRA last: it is unloaded from the model afterwards
    lrs = {"gates": check_finite(gate_lr, "--gate-lr", 0.0), "bias": check_finite(bias_lr, "--bias-lr", 0.0),
           "lora": check_finite(lora_lr, "--lora-lr", 0.0)}
    if "lora" in chosen:
        import importlib.util

        from geosteer.errors import GeosteerError

        if importlib.util.find_spec("peft") is None:
            raise GeosteerError("the lora method needs peft: pip install 'geosteer[lora]'")
    check_positions(model, "--train-seq", train_seq)
    m, tok = setup_model(model, threads, device, dtype, seq_len=seq_len)
    heldout = corpus_windows(tok, "heldout", tokens, seq_len)
    cfg_kw = {"tokens": train_tokens, "batch_size": train_batch, "seq_len": train_seq, "seed": seed}
    rows = finetune_rows(m, tok, heldout, chosen, lrs, cfg_kw, lora_rank, batch_size, log=print)
    meta = run_meta(m, methods=chosen, train_tokens=train_tokens, train_batch=train_batch, train_seq=train_seq,
                    lrs={k: lrs[k] for k in chosen}, lora_rank=lora_rank, lora_modules=["down_proj"], seed=seed,
                    eval_tokens=int(heldout.numel()), seq_len=seq_len, encoding="bos-window",
                    train_text="train split", eval_text="held-out split, --context windows, BOS first")
    write_rows(rows, meta, out, csv)
    emit({"meta": meta, "rows": rows} if as_json else rows, as_json, table_title="gates vs fine-tuning")
