"""Study: from-scratch models trained with the edit active (``geosteer study directional pretrain``,
paper Fig. 5, Table 3, Fig. 8)."""

from __future__ import annotations

from pathlib import Path

import typer

from geosteer.cli.common import MAX_SEEDS, THREADS_OPT, set_threads
from geosteer.cli.outputs import out_dir


def pretrain_cmd(
    variants: str = typer.Option("baseline,attn_par,value_par", "--variants"),
    seeds: str = typer.Option("0,1", "--seed-list", help="comma-separated seeds, e.g. 0,1,2"),
    steps: int = typer.Option(300, "--steps", min=1),
    batch: int = typer.Option(16, "--batch-size", min=1, max=4096, help="sequences per step"),
    ctx: int = typer.Option(128, "--context", min=1, max=1 << 16, help="window length in bytes"),
    lr: float = typer.Option(3e-3, "--lr"),
    d_model: int = typer.Option(128, "--d-model", min=2, max=8192,
                                help="model width; heads = max(1, d_model // 32), each an even size"),
    n_layers: int = typer.Option(4, "--n-layers", min=1, max=256, help="depth of the model trained (blocks)"),
    eval_every: int = typer.Option(25, "--eval-every", min=1),
    val_batches: int = typer.Option(16, "--val-batches", min=1, max=4096,
                                    help="fixed held-out batches for the val loss"),
    out_dir: Path = typer.Option(Path("."), "--out-dir", callback=out_dir()),
    threads: int = THREADS_OPT,
) -> None:
    """From-scratch byte-level models trained with the edit active: baseline vs attention / value parallel
    removal (study 3 of docs/directional.md)."""

    import torch

    from geosteer.errors import GeosteerError
    from geosteer.io_utils import write_records
    from geosteer_paper.directional.pretrain import VARIANTS, byte_ids, sample_batch, train_one

    set_threads(threads)
    vs = [v.strip() for v in variants.split(",") if v.strip()]
    bad = [v for v in vs if v not in VARIANTS]
    if bad:
        raise GeosteerError(f"unknown variant '{bad[0]}'; valid: {', '.join(VARIANTS)}")
    seed_list = _parse_seeds(seeds)
    if not vs:
        raise GeosteerError(f"--variants is empty; valid: {', '.join(VARIANTS)}")
    if not lr > 0:
        raise GeosteerError(f"--lr must be > 0 (got {lr})")
    heads = max(1, d_model // 32)
    if d_model % (2 * heads):
        raise GeosteerError(f"--d-model {d_model} splits into {heads} head(s) of odd or fractional size; use a "
                            "width whose heads (d_model // 32 of them) are an even size, e.g. 64, 128, 256")
    train = byte_ids("train", max_chars=4_000_000)
    held = byte_ids("heldout")
    g = torch.Generator().manual_seed(12345)
    vals = [sample_batch(held, g, batch, ctx) for _ in range(val_batches)]
    model_kw = {"d_model": d_model, "layers": n_layers, "heads": heads, "ffn": 3 * d_model}
    curves, finals = [], []
    meta = {"steps": steps, "batch": batch, "ctx": ctx, "lr": lr, "model": model_kw, "tokenizer": "bytes",
            "train_bytes": int(len(train)), "val_tokens": val_batches * batch * ctx}
    for seed in seed_list:
        for v in vs:
            res = train_one(v, seed, train, vals, steps=steps, batch=batch, ctx=ctx, lr=lr,
                            eval_every=eval_every, model_kw=model_kw)
            curves += res["curve"]
            finals.append({"variant": v, "seed": seed, "final_val_loss": res["final_val"],
                           "params": res["params"], "seconds": round(res["seconds"], 1)})
            write_records(out_dir / "pretrain_curves.csv", curves)
            write_records(out_dir / "pretrain_final.json", finals, meta)


def _parse_seeds(spec: str) -> list[int]:
    from geosteer.errors import GeosteerError

    try:
        seeds = [int(s) for s in spec.split(",") if s.strip()]
    except ValueError:
        raise GeosteerError(f"bad --seed-list {spec!r}: comma-separated whole numbers, e.g. 0,1,2") from None
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0 or len(seeds) > MAX_SEEDS:
        raise GeosteerError(f"bad --seed-list {spec!r}: give 1 to {MAX_SEEDS} different seeds >= 0, e.g. 0,1,2")
    return seeds
