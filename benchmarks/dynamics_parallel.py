"""Measured speed-up of parallelised blocks: A and Φ of each chosen block run concurrently (two threads).

Interleaved stock / parallel-concurrent forwards (BENCHMARKING.md), same tokens, after one warm-up each.
With ``--threads 1`` the stock forward uses one core and the concurrent one up to two; with ``--threads 2``
both may use both cores. Also prints the paper's submodule-time estimate for the same layers. The
chosen layers are the lowest-C_ℓ ones (C_ℓ measured on train text).

    .venv/bin/python benchmarks/dynamics_parallel.py --model smollm2 --layers 8 --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8, help="number of lowest-C layers to parallelise")
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from geosteer import load_model
    from geosteer.dynamics.diagnostics import corpus_windows
    from geosteer.dynamics.parallel import (
        ConcurrentParallel,
        defect_profile,
        estimated_speedup,
        layer_order,
        submodule_times,
    )
    from geosteer.interventions import steer

    model, tok = load_model(args.model)
    ids = corpus_windows(tok, "heldout", args.tokens, args.tokens)
    defects = defect_profile(model, corpus_windows(tok, "train", 512, 256))
    chosen = sorted(layer_order(defects, "low")[: args.layers])
    times = submodule_times(model, ids, repeats=3)

    def run(ivs) -> float:
        t = time.perf_counter()
        with torch.no_grad(), steer(model, *ivs):
            model(input_ids=ids, use_cache=False)
        return time.perf_counter() - t

    conc = (ConcurrentParallel(chosen),)
    run(()), run(conc)
    pairs = [(run(()), run(conc)) for _ in range(args.pairs)]
    speed = [s / p for s, p in pairs]
    print(json.dumps({
        "benchmark": "dynamics_parallel", "model": args.model, "tokens": int(ids.numel()), "layers": chosen,
        "threads": args.threads, "cores": os.cpu_count(), "torch": torch.__version__, "pairs": args.pairs,
        "stock_s_median": statistics.median(s for s, _ in pairs),
        "concurrent_s_median": statistics.median(p for _, p in pairs),
        "measured_speedup_median": statistics.median(speed), "measured_min": min(speed),
        "measured_max": max(speed), "estimated_speedup_blocks": estimated_speedup(times, chosen),
    }))


if __name__ == "__main__":
    main()
