"""A clean full-precision base for the compression study: a from-scratch byte-level model, saved in fp32.

The pretraining study's Llama-style byte model (``geosteer_paper.directional.pretrain.small_model``) is trained
without any edit, with that study's schedule (AdamW, warmup + cosine, gradient clip 1), on the corpus
train split, and saved with ``save_pretrained`` (safetensors, fp32). A checkpoint (model, optimiser, data
generator, step) is written every ``--checkpoint-every`` steps into the output folder; rerunning the same
command resumes from it. The held-out validation loss (nats per byte) is logged with each checkpoint.

    python paper/studies/directional/compression_base.py --out .cache/compression-base-d192x8 \\
        --d-model 192 --n-layers 8 --steps 300 --seed 0 --checkpoint-every 25 --threads 1
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from geosteer.errors import GeosteerError
from geosteer_paper.scripts import command_line, run_script


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python paper/studies/directional/compression_base.py",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for the model (and its checkpoint)")
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--n-layers", type=int, default=4)
    ap.add_argument("--steps", type=int, default=900)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--checkpoint-every", type=int, default=50)
    ap.add_argument("--val-batches", type=int, default=8)
    ap.add_argument("--threads", type=int, default=None)
    return ap


def check(a: argparse.Namespace) -> None:
    for name in ("d_model", "n_layers", "steps", "batch", "ctx", "checkpoint_every", "val_batches"):
        if getattr(a, name) < 1:
            raise GeosteerError(f"--{name.replace('_', '-')} must be >= 1 (got {getattr(a, name)})")
    if a.d_model % 64:
        raise GeosteerError(f"--d-model must be a multiple of 64 (heads of 32, quantisation groups of 64); "
                            f"got {a.d_model}")
    if not a.lr > 0:
        raise GeosteerError(f"--lr must be > 0 (got {a.lr})")
    if a.out.exists() and not (a.out / "train_state.pt").exists() and any(a.out.iterdir()):
        raise GeosteerError(f"--out {a.out} exists and holds no checkpoint of this script; choose a new folder")


def run(a: argparse.Namespace, argv: Sequence[str] | None) -> None:
    from geosteer_paper.directional.pretrain import (
        byte_ids,
        lm_loss,
        mean_loss,
        sample_batch,
        small_model,
        warmup_cosine_lr,
    )

    check(a)
    if a.threads:
        torch.set_num_threads(a.threads)
    train = byte_ids("train", max_chars=4_000_000)
    held = byte_ids("heldout")
    g = torch.Generator().manual_seed(12345)
    vals = [sample_batch(held, g, a.batch, a.ctx) for _ in range(a.val_batches)]
    model = small_model(d_model=a.d_model, layers=a.n_layers, heads=a.d_model // 32, ffn=3 * a.d_model,
                        ctx=a.ctx, seed=a.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(1000 + a.seed)
    a.out.mkdir(parents=True, exist_ok=True)
    state_file, log = a.out / "train_state.pt", []
    start = 0
    if state_file.exists():
        st = torch.load(state_file, weights_only=False)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        gen.set_state(st["gen"])
        start, log = st["step"], st["log"]
        print(f"resumed at step {start}", flush=True)
    model.train()
    t0 = time.time()
    for step in range(start, a.steps):
        for grp in opt.param_groups:
            grp["lr"] = warmup_cosine_lr(step, a.lr, a.steps)
        loss = lm_loss(model, sample_batch(train, gen, a.batch, a.ctx))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if (step + 1) % a.checkpoint_every == 0 or step + 1 == a.steps:
            val = mean_loss(model, vals)
            log.append({"step": step + 1, "train_loss": loss.item(), "val_loss": val})
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "gen": gen.get_state(),
                        "step": step + 1, "log": log}, str(state_file) + ".tmp")
            Path(str(state_file) + ".tmp").replace(state_file)
            print(f"step {step + 1}: train {loss.item():.4f} val {val:.4f} ({time.time() - t0:.0f} s)", flush=True)
    model.eval()
    model.save_pretrained(a.out)
    meta = {"command": command_line("directional/compression_base.py", argv),
            "seed": a.seed, "d_model": a.d_model, "n_layers": a.n_layers, "steps": a.steps, "batch": a.batch,
            "ctx": a.ctx, "lr": a.lr, "params": sum(p.numel() for p in model.parameters()), "log": log}
    (a.out / "base_training.json").write_text(json.dumps(meta, indent=2))


def main(argv: Sequence[str] | None = None) -> None:
    run_script(parser(), run, argv)


if __name__ == "__main__":
    main()
