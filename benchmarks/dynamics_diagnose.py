"""Cost of the full one-pass dynamics diagnostics vs one stock forward on the same tokens.

Interleaved A/B pairs after one warm-up each (see /work/shared/BENCHMARKING.md); prints the median ratio
and its min–max spread. The diagnostics pass = all per-layer statistics incl. the C_ℓ defect (one extra FFN
call per layer); top-k and the OV probe are separate passes and not included.

    .venv/bin/python benchmarks/dynamics_diagnose.py --model smollm2 --tokens 512 --pairs 7 --threads 2
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
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from geosteer import load_model
    from geosteer.dynamics.diagnostics import DiagnosticsCollector, corpus_windows
    from geosteer.steer import steer

    model, tok = load_model(args.model)
    ids = corpus_windows(tok, "heldout", args.tokens, args.tokens)

    def stock() -> float:
        t = time.perf_counter()
        with torch.no_grad():
            model(input_ids=ids, use_cache=False)
        return time.perf_counter() - t

    def diag() -> float:
        col = DiagnosticsCollector()
        t = time.perf_counter()
        with torch.no_grad(), steer(model, col):
            model(input_ids=ids, use_cache=False)
        col.rows()
        return time.perf_counter() - t

    stock(), diag()
    pairs = [(stock(), diag()) for _ in range(args.pairs)]
    ratios = [d / s for s, d in pairs]
    print(json.dumps({
        "benchmark": "dynamics_diagnose", "model": args.model, "tokens": int(ids.numel()),
        "threads": args.threads, "cores": os.cpu_count(), "torch": torch.__version__, "pairs": args.pairs,
        "stock_s_median": statistics.median(s for s, _ in pairs),
        "diagnose_s_median": statistics.median(d for _, d in pairs),
        "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
    }))


if __name__ == "__main__":
    main()
