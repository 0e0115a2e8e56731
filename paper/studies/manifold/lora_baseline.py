"""PEFT LoRA on q_proj/v_proj with a parameter count matched to the surfaces, trained by the same loop.

Same data, batch order (seed), tokens, schedule shape and held-out evaluation as ``geosteer manifold
train``, so the two differ only in the intervention. Needs ``pip install 'geosteer[lora]'``.

    python paper/studies/manifold/lora_baseline.py --layers 8-15 --rank 36 --tokens 65536 --lr 3e-3 \
        --out runs/lora-r36 --result docs/results/manifold_lora_r36.json --threads 1
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import torch

from geosteer import anatomy, load_model
from geosteer.io_utils import atomic_write_json
from geosteer.manifold.train import parse_layers
from geosteer.train import TrainConfig, train


def lora_params_per_rank(model, layers: list[int]) -> int:
    """Parameters per unit of rank of a LoRA on q_proj and v_proj of ``layers``: Σ (in + out)."""
    an = anatomy(model)
    n = 0
    for layer in layers:
        attn = an.blocks[layer].attn
        for name in ("q_proj", "v_proj"):
            lin = getattr(attn, name)
            n += lin.in_features + lin.out_features
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--layers", default="8-15")
    ap.add_argument("--rank", type=int, default=None, help="default: matched to grid-8 surfaces")
    ap.add_argument("--alpha", type=float, default=None, help="lora_alpha (default: = rank, scaling 1)")
    ap.add_argument("--tokens", type=int, default=65536)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-tokens", type=int, default=32768)
    ap.add_argument("--eval-before", action="store_true", help="also score the stock model first")
    ap.add_argument("--checkpoint-every", type=int, default=8)
    ap.add_argument("--eval-every", type=int, default=0, help="steps between held-out evaluations (0: end only)")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--out", type=Path, required=True, help="folder for checkpoint + adapter")
    ap.add_argument("--result", type=Path, required=True, help="tidy JSON result")
    ap.add_argument("--threads", type=int, default=None)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    from peft import LoraConfig, get_peft_model

    model, tok = load_model(a.model)
    an = anatomy(model)
    layers = parse_layers(a.layers, an.n_layers) or list(range(an.n_layers))
    surface_params = len(layers) * an.n_heads * an.head_dim * 11 * 11
    per_rank = lora_params_per_rank(model, layers)
    rank = a.rank or max(1, round(surface_params / per_rank))
    alpha = a.alpha if a.alpha is not None else float(rank)
    lcfg = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules=["q_proj", "v_proj"],
                      layers_to_transform=layers, bias="none")
    pm = get_peft_model(model, lcfg)
    n_lora = sum(p.numel() for p in pm.parameters() if p.requires_grad)
    cfg = TrainConfig(lr=a.lr, tokens=a.tokens, batch_size=a.batch, seq_len=a.seq_len, seed=a.seed,
                      eval_tokens=a.eval_tokens, checkpoint_every=a.checkpoint_every, eval_every=a.eval_every,
                      eval_before_after=True)
    print(f"LoRA r={rank} alpha={alpha} on q_proj,v_proj of layers {a.layers}: {n_lora:,} params "
          f"(grid-8 surfaces on the same layers: {surface_params:,})", flush=True)
    res = train(model, pm, cfg, tok=tok, out_dir=a.out, resume=a.resume, progress=False,
                log=lambda s: print(s, flush=True), eval_before=a.eval_before)
    pm.save_pretrained(str(a.out / "adapter"))
    n_model = sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n)
    atomic_write_json(a.result, {
        "meta": {"command": "python " + " ".join(shlex.quote(x) for x in sys.argv), "model": a.model,
                 "method": "peft-lora", "peft_version": __import__("peft").__version__, "target_modules":
                 ["q_proj", "v_proj"], "layers": layers, "rank": rank, "lora_alpha": alpha,
                 "trainable_params": n_lora, "model_params": n_model,
                 "matched_to_surface_params": surface_params,
                 "train_config": cfg.to_dict(), "threads": torch.get_num_threads()},
        "rows": [{"method": "lora", "rank": rank, "step": e["step"],
                  "tokens": e["step"] * a.batch * a.seq_len,
                  "heldout_ppl": e["ppl"], "heldout_nll": e["nll"], "heldout_tokens": e["tokens"],
                  "seed": a.seed} for e in res.evals],
        "history": res.history,
    })
    print(f"LoRA held-out ppl after {res.tokens_seen} tokens: {res.ppl_after}", flush=True)


if __name__ == "__main__":
    main()
