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
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import paired  # noqa: E402


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
    from geosteer.interventions import steer

    model, tok = load_model(args.model)
    ids = corpus_windows(tok, "heldout", args.tokens, args.tokens)

    def stock() -> None:
        with torch.no_grad():
            model(input_ids=ids, use_cache=False)

    def diag() -> None:
        col = DiagnosticsCollector()
        with torch.no_grad(), steer(model, col):
            model(input_ids=ids, use_cache=False)
        col.rows()

    r = paired(stock, diag, args.pairs, ("wall", "cpu"))
    w, c = r["wall"], r["cpu"]
    print(json.dumps({
        "benchmark": "dynamics_diagnose", "model": args.model, "tokens": int(ids.numel()),
        "threads": args.threads, "cores": os.cpu_count(), "torch": torch.__version__, "pairs": args.pairs,
        "stock_s_median": w["a_s"], "diagnose_s_median": w["b_s"],
        "ratio_median": w["ratio"], "ratio_min": w["ratio_min"], "ratio_max": w["ratio_max"],
        "cpu_ratio_median": c["ratio"], "cpu_ratio_min": c["ratio_min"], "cpu_ratio_max": c["ratio_max"],
    }))

if __name__ == "__main__":
    main()
