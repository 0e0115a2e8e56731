"""Export a training checkpoint of `geosteer learn surfaces` as a surfaces artifact, with held-out ppl.

Used when a run has to be cut short (a 2-core machine shared with other jobs): the artifact records the
step and tokens actually trained, the planned schedule, and held-out perplexity with/without surfaces
measured here on the same capped held-out tokens.

    .venv/bin/python paper/studies/manifold/export_checkpoint.py \
        artifacts/smollm2-surfaces.train/checkpoint.safetensors --out artifacts/smollm2-surfaces \
        --eval-tokens 16384 --command "<the training command>"
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--eval-tokens", type=int, default=16384)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--command", default="", help="the training command that wrote the checkpoint")
    ap.add_argument("--dtype", default="float16")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)

    from geosteer import load_model
    from geosteer.data.corpus import split_text
    from geosteer.eval.perplexity import strided_perplexity
    from geosteer.interventions import steer
    from geosteer.manifold import install, save
    from geosteer.train.checkpoint import load_checkpoint

    state = load_checkpoint(a.checkpoint)
    surf = state["extra"]["surfaces"]
    cfg = state.get("config", {})
    (name, coeff), = state["params"].items()
    model, tok = load_model(a.model)
    bank = install(model, grid_size=surf["grid_size"], layers=surf["layers"],
                   ranges=[tuple(r) for r in surf["ranges"]])
    with torch.no_grad():
        bank.coefficients.copy_(coeff)
    from geosteer.manifold import uninstall

    uninstall(model)
    text = split_text("heldout")
    kw = dict(context=512, stride=256, max_tokens=a.eval_tokens, batch_size=4)
    before = strided_perplexity(model, tok, text, **kw)
    with steer(model, bank):
        after = strided_perplexity(model, tok, text, **kw)
    step = int(state["step"])
    seq_len = int(cfg.get("seq_len", 128)) if isinstance(cfg, dict) else 128
    batch = int(cfg.get("batch_size", 8)) if isinstance(cfg, dict) else 8
    n_model = sum(p.numel() for p in model.parameters())
    training = {
        "text": "bundled corpus, train split", "tokens": step * seq_len * batch, "steps": step,
        "planned_steps": cfg.get("steps") or -(-int(cfg.get("tokens", 0)) // (batch * seq_len)),
        "note": "exported from the step checkpoint: the run was cut short for time on a shared 2-core CPU "
                "(cosine schedule planned for the full run, so lr had not decayed)",
        "config": cfg if isinstance(cfg, dict) else str(cfg),
        "heldout": {"split": "heldout", "context": 512, "stride": 256, "max_tokens": a.eval_tokens,
                    "ppl_before": before.ppl, "ppl_after": after.ppl, "tokens_scored": after.tokens},
        "parameter_overhead": {"surface_params": bank.n_parameters(), "model_params": n_model,
                               "fraction": bank.n_parameters() / n_model},
    }
    save(bank, a.out, dtype=a.dtype, training=training, calibration=surf.get("calibration"),
         command=a.command)
    print(f"step {step}: held-out ppl {before.ppl:.4f} -> {after.ppl:.4f} on {after.tokens} tokens; "
          f"saved {a.out} ({bank.n_parameters():,} params, {bank.n_parameters() / n_model:.2%} of the model)")


if __name__ == "__main__":
    main()
