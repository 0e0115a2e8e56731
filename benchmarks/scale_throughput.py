"""What one CPU machine does: tokens/s for evaluation (strided perplexity) and for training trainable
interventions (surfaces, FFN gates) with the shared loop, on the default model, one process.

Absolute tokens/s depend on the machine and its load (shared machines: read them with the machine line
and as ±20%); the ratio of training to evaluation throughput is the more portable figure.

    .venv/bin/python benchmarks/scale_throughput.py --threads 2 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--eval-tokens", type=int, default=2048)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lora", action="store_true",
                    help="also surfaces vs PEFT LoRA r36 on q/v, both on --lora-layers (the manifold study)")
    ap.add_argument("--lora-layers", default="8-15", help="FIRST-LAST layers of the --lora comparison")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    import geosteer.manifold as M
    from geosteer import load_model
    from geosteer.data.corpus import split_text
    from geosteer.dynamics.gates import FFNGates
    from geosteer.eval.perplexity import encode, strided_perplexity
    from geosteer.train import TrainConfig, train

    model, tok = load_model(args.model)
    ids = encode(tok, split_text("heldout", max_chars=args.eval_tokens * 8))[: args.eval_tokens]
    train_ids = encode(tok, split_text("train", max_chars=400_000))

    def eval_tps() -> float:
        t0 = time.perf_counter()
        r = strided_perplexity(model, tok, ids=ids, context=512, stride=256, batch_size=4)
        return r.tokens / (time.perf_counter() - t0)

    def train_tps(trainable, steps: int, interventions=()) -> float:
        cfg = TrainConfig(lr=1e-3, steps=steps, batch_size=args.batch, seq_len=args.seq_len,
                          eval_before_after=False, checkpoint_every=0, seed=0)
        res = train(model, trainable, cfg, train_ids=train_ids, progress=False, log=None,
                    interventions=interventions)
        return statistics.median(h["tokens_per_s"] for h in res.history[1:])  # step 1 warms up

    eval_tps()  # warm-up
    rows = {"eval_strided_ppl": [], "train_surfaces": [], "train_ffn_gates": []}
    if args.lora:
        lo, hi = (int(x) for x in args.lora_layers.split("-"))
        study_layers = list(range(lo, hi + 1))
        rows.update({"train_surfaces_study_layers": [], "train_lora_r36_study_layers": []})
    for _ in range(args.repeats):  # interleaved rounds
        rows["eval_strided_ppl"].append(eval_tps())
        bank = M.install(model, grid_size=8, grid_range=(-4.0, 4.0))
        rows["train_surfaces"].append(train_tps(bank, 3))
        M.uninstall(model)
        gates = FFNGates.for_model(model)
        rows["train_ffn_gates"].append(train_tps(gates, 3, interventions=[gates]))
        if args.lora:
            from peft import LoraConfig, get_peft_model

            bank = M.install(model, grid_size=8, grid_range=(-4.0, 4.0), layers=study_layers)
            rows["train_surfaces_study_layers"].append(train_tps(bank, 3))
            M.uninstall(model)
            pm = get_peft_model(model, LoraConfig(r=36, lora_alpha=36.0, lora_dropout=0.0, bias="none",
                                                  target_modules=["q_proj", "v_proj"],
                                                  layers_to_transform=study_layers))
            rows["train_lora_r36_study_layers"].append(train_tps(pm, 3))
            model = pm.unload()
            model.requires_grad_(False)
    print(f"machine: {machine(args.threads)}")
    print(f"setup: model {args.model}, fp32, eval context 512 stride 256 batch 4 over {ids.numel()} tokens; "
          f"train batch {args.batch} x seq {args.seq_len} (AdamW, 3 steps, median of steps 2-3); "
          f"repeats {args.repeats}")
    figs = {}
    for name, vals in rows.items():
        figs[name] = {"tokens_per_s_median": statistics.median(vals), "min": min(vals), "max": max(vals)}
        med = statistics.median(vals)
        print(f"{name}_tokens_per_s: {med:.0f} (min {min(vals):.0f}, max {max(vals):.0f})")
    if args.out:
        from geosteer.io_utils import atomic_write_json

        atomic_write_json(args.out, {"machine": machine(args.threads), "figures": figs, "args": vars(args)})


if __name__ == "__main__":
    main()
