"""Cost of the full one-pass dynamics diagnostics vs one stock forward on the same tokens.

Interleaved A/B pairs after one warm-up each (see /work/shared/BENCHMARKING.md); prints the median ratio
and its min–max spread, for wall time and for this process' CPU time (``time.process_time``; on a shared
machine the CPU-time ratio is the steadier one at ``--threads 1``). The diagnostics pass = all per-layer
statistics incl. the C_ℓ defect (one extra FFN call per layer); top-k and the OV probe are separate
passes and not included.

    .venv/bin/python benchmarks/dynamics_diagnose.py --model smollm2 --tokens 512 --pairs 7 --threads 1
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
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from geosteer import load_model
    from geosteer.dynamics.diagnostics import DiagnosticsCollector, corpus_windows
    from geosteer.steer import steer

    model, tok = load_model(args.model)
    ids = corpus_windows(tok, "heldout", args.tokens, args.tokens)

    def stock() -> tuple[float, float]:
        t, c = time.perf_counter(), time.process_time()
        with torch.no_grad():
            model(input_ids=ids, use_cache=False)
        return time.perf_counter() - t, time.process_time() - c

    def diag() -> tuple[float, float]:
        col = DiagnosticsCollector()
        t, c = time.perf_counter(), time.process_time()
        with torch.no_grad(), steer(model, col):
            model(input_ids=ids, use_cache=False)
        col.rows()
        return time.perf_counter() - t, time.process_time() - c

    stock(), diag()
    pairs = [(stock(), diag()) for _ in range(args.pairs)]
    ratios = [d[0] / s[0] for s, d in pairs]
    cpu = [d[1] / s[1] for s, d in pairs]
    print(json.dumps({
        "benchmark": "dynamics_diagnose", "model": args.model, "tokens": int(ids.numel()),
        "threads": args.threads, "cores": os.cpu_count(), "torch": torch.__version__, "pairs": args.pairs,
        "stock_s_median": statistics.median(s[0] for s, _ in pairs),
        "diagnose_s_median": statistics.median(d[0] for _, d in pairs),
        "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
        "cpu_ratio_median": statistics.median(cpu), "cpu_ratio_min": min(cpu), "cpu_ratio_max": max(cpu),
    }))


if __name__ == "__main__":
    main()
