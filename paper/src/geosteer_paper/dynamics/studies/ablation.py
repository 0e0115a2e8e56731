"""``geosteer study dynamics ablate | gains``: the FFN variants (Fig. 3) and the gain corridor (Table 3) as
one results file each. Each loss is the nll ``geosteer ppl --windows independent --set ...`` gives for that
setting on the same windows; these studies write them side by side with the full model's."""

from __future__ import annotations

from pathlib import Path

import typer

from geosteer.cli.common import DEVICE_OPT, DTYPE_OPT, JSON_OPT, MODEL_OPT, THREADS_OPT, emit
from geosteer_paper.dynamics.studies.common import (
    BATCH_OPT,
    CSV_OPT,
    OUT_OPT,
    SEQ_OPT,
    TOKENS_OPT,
    parse_floats,
    run_meta,
    setup_windows,
    write_rows,
)


def ablate(model: str = MODEL_OPT,
           variants: str = typer.Option("zero,radial,tangential,attn_zero", "--variants"),
           layers: str = typer.Option("all", "--layers", help="layer range, e.g. 0-29 or 3,5"),
           tokens: int = TOKENS_OPT, seq_len: int = SEQ_OPT, batch_size: int = BATCH_OPT,
           as_json: bool = JSON_OPT, out: Path | None = OUT_OPT, csv: Path | None = CSV_OPT,
           threads: int = THREADS_OPT, device: str = DEVICE_OPT, dtype: str = DTYPE_OPT) -> None:
    """Held-out loss of FFN variants (full / zero / radial / tangential / attn_zero) vs the full model."""
    from geosteer.dynamics.config import check_variant
    from geosteer.dynamics.parallel import mean_loss
    from geosteer.dynamics.variants import FFNVariant

    names = [check_variant(v.strip()) for v in variants.split(",") if v.strip()]
    m, chosen, ids = setup_windows(model, threads, device, dtype, seq_len=seq_len, layers=layers, tokens=tokens)
    base = mean_loss(m, ids, batch_size)
    rows = [{"variant": "full", "layers": layers, "loss": base, "loss_increase": 0.0}]
    for v in names:
        if v == "full":
            continue
        loss = mean_loss(m, ids, batch_size, (FFNVariant(v, chosen),))
        rows.append({"variant": v, "layers": layers, "loss": loss, "loss_increase": loss - base})
    write_rows(rows, run_meta(m, tokens=int(ids.numel()), seq_len=seq_len), out, csv)
    emit(rows, as_json, table_title="FFN variants")


def gains(model: str = MODEL_OPT,
          values: str = typer.Option("0,0.5,1,1.5,2", "--values"),
          layers: str = typer.Option("all", "--layers"), tokens: int = TOKENS_OPT, seq_len: int = SEQ_OPT,
          batch_size: int = BATCH_OPT, as_json: bool = JSON_OPT, out: Path | None = OUT_OPT,
          csv: Path | None = CSV_OPT, threads: int = THREADS_OPT,
          device: str = DEVICE_OPT, dtype: str = DTYPE_OPT) -> None:
    """Sweep the attention gain β_A (α_F = 1) and the FFN gain α_F (β_A = 1): held-out loss increase."""
    from geosteer.dynamics.parallel import mean_loss
    from geosteer.dynamics.variants import Gains

    vals = parse_floats(values, "--values")
    m, chosen, ids = setup_windows(model, threads, device, dtype, seq_len=seq_len, layers=layers, tokens=tokens)
    base = mean_loss(m, ids, batch_size)
    rows = []
    for which in ("beta_attn", "alpha_ffn"):
        for v in vals:
            loss = base if v == 1.0 else mean_loss(m, ids, batch_size, (Gains(layers=chosen, **{which: v}),))
            rows.append({"gain": which, "value": v, "loss": loss, "loss_increase": loss - base})
    write_rows(rows, run_meta(m, tokens=int(ids.numel()), seq_len=seq_len, layers=layers), out, csv)
    emit(rows, as_json, table_title="gain sweeps")
