"""Surfaces decoding beside a static vs a dynamic KV cache (eager, CPU or GPU): time per new token.

Both KV caches are prefilled once with a ``--prompt-tokens`` prompt (stock) and rewound to it before every
run; each run decodes ``--new-tokens`` greedy tokens and times the steps after the first (the first step
computes the key features of the whole prompt on either side). Sides, interleaved, median of ``--repeats``
after one warm-up round: stock and surfaces, each with transformers' ``DynamicCache`` (the growing
``FeatureCache``) and ``StaticCache`` (the preallocated ``StaticFeatureCache``). One JSON record.

    .venv/bin/python benchmarks/manifold_static_decode.py --surfaces artifacts/smollm2-surfaces \\
        --prompt-tokens 1024 --new-tokens 17 --repeats 5 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch
from _common import machine
from transformers import DynamicCache, StaticCache

from geosteer import load_model, manifold


def decode_run(model, cache, rewind, first, n_new: int) -> float:
    """Seconds of decode steps 2..n_new (greedy, from the rewound cache)."""
    rewind()
    tok = first
    t0 = 0.0
    with torch.no_grad():
        for i in range(n_new):
            if i == 1:
                t0 = time.perf_counter()
            tok = model(input_ids=tok, cache=cache, use_cache=True).logits[:, -1].argmax(-1, keepdim=True)
    return (time.perf_counter() - t0) / (n_new - 1)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--surfaces", required=True, help="surfaces artifact folder")
    ap.add_argument("--prompt-tokens", type=int, default=1024)
    ap.add_argument("--new-tokens", type=int, default=17)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    for name, value, least in (("--repeats", a.repeats, 1), ("--new-tokens", a.new_tokens, 2),
                               ("--prompt-tokens", a.prompt_tokens, 1), ("--threads", a.threads, 1)):
        if value < least:
            ap.error(f"{name} must be an integer >= {least} (got {value})")
    torch.set_num_threads(a.threads)
    model, _ = load_model(a.model)
    bank = manifold.load(a.surfaces, model=model)
    manifold.install(model, bank=bank)
    g = torch.Generator().manual_seed(a.seed)
    ids = torch.randint(10, model.config.vocab_size, (1, a.prompt_tokens), generator=g)
    n0 = a.prompt_tokens
    caches = {"dynamic": DynamicCache(config=model.config),
              "static": StaticCache(config=model.config, max_cache_len=n0 + a.new_tokens)}
    rewinds = {"dynamic": lambda: caches["dynamic"].crop(min(0, n0 - caches["dynamic"].get_seq_length())),
               "static": lambda: [x.cumulative_length.fill_(n0) for x in caches["static"].layers]}
    bank.enabled = False
    with torch.no_grad():
        for c in caches.values():
            first = model(input_ids=ids, cache=c, use_cache=True).logits[:, -1].argmax(-1, keepdim=True)
    sides = [(s, kind) for kind in caches for s in ("stock", "surfaces")]
    times: dict = {f"{s}_{k}": [] for s, k in sides}
    for r in range(a.repeats + 1):
        for s, k in sides:
            bank.enabled = s == "surfaces"
            t = decode_run(model, caches[k], rewinds[k], first, a.new_tokens)
            if r:
                times[f"{s}_{k}"].append(t)
    med = {k: statistics.median(v) for k, v in times.items()}
    rec = {"command": "benchmarks/manifold_static_decode.py " + " ".join(sys.argv[1:]),
           "machine": machine(a.threads), "load_avg_1m": os.getloadavg()[0],
           "per_token_ms": {k: round(v * 1e3, 3) for k, v in med.items()},
           "ratio_dynamic": round(med["surfaces_dynamic"] / med["stock_dynamic"], 3),
           "ratio_static": round(med["surfaces_static"] / med["stock_static"], 3),
           "surfaces_static_vs_dynamic": round(med["surfaces_static"] / med["surfaces_dynamic"], 3)}
    print(json.dumps(rec, indent=1))


if __name__ == "__main__":
    main()
