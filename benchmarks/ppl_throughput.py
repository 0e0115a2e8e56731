"""Strided-perplexity throughput: geosteer (batched windows) vs a plain HF loop over the same windows.

Interleaved A/B/A/B after one warm-up each; median of --repeats pairs; prints one `name: value` line per
figure plus the machine. Both sides score the same token ids with the same windows and must agree.

    .venv/bin/python benchmarks/ppl_throughput.py --tokens 4096 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import paired  # noqa: E402


def plain_hf_loop(model, ids, context, stride):
    seq_len = ids.size(1)
    nll_sum, n_tokens, prev_end = 0.0, 0, 0
    for begin in range(0, seq_len, stride):
        end = min(begin + context, seq_len)
        trg_len = end - prev_end
        input_ids = ids[:, begin:end]
        target_ids = input_ids.clone()
        target_ids[:, :-trg_len] = -100
        with torch.no_grad():
            loss = model(input_ids, labels=target_ids).loss
        n = (target_ids[:, 1:] != -100).sum().item()
        nll_sum += loss.item() * n
        n_tokens += n
        prev_end = end
        if end == seq_len:
            break
    return math.exp(nll_sum / n_tokens), n_tokens


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--stride", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from geosteer import load_model
    from geosteer.data.corpus import split_text
    from geosteer.eval.perplexity import encode, strided_perplexity

    model, tok = load_model(args.model)
    ids = encode(tok, split_text("heldout", max_chars=args.tokens * 8))[: args.tokens]

    def ours():
        return strided_perplexity(model, tok, ids=ids, context=args.context, stride=args.stride,
                                  batch_size=args.batch_size)

    def theirs():
        return plain_hf_loop(model, ids[None], args.context, args.stride)

    a, b = ours(), theirs()  # warm-up + agreement check
    rel = abs(a.ppl - b[0]) / b[0]
    t = paired(ours, theirs, args.repeats, warmup=False)["wall"]  # ratio = plain HF time / geosteer time
    res = {
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, torch {torch.__version__}, threads {args.threads}",
        "model": args.model,
        "tokens": a.tokens,
        "ppl_geosteer": a.ppl,
        "ppl_plain_hf": b[0],
        "ppl_rel_diff": rel,
        "geosteer_s_median": t["a_s"],
        "plain_hf_s_median": t["b_s"],
        "geosteer_tokens_per_s": a.tokens / t["a_s"],
        "speedup_vs_plain_hf_median": t["ratio"],
        "speedup_min": t["ratio_min"],
        "speedup_max": t["ratio_max"],
    }
    for k, v in res.items():
        print(f"{k}: {v}")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
