"""Wall time of the critical-candidate search (issue 13 bar: one layer of the default model in <= 2 min on
2 cores): seeds, Adam search, labelling (575 x 575 tangent spectra), refinement, for all three fields.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/dynamics_critical.py --model smollm2 --layer 15 --threads 2
"""

from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--layer", type=int, default=15)
    ap.add_argument("--real", type=int, default=16)
    ap.add_argument("--random", type=int, default=16)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)

    from geosteer import load_model
    from geosteer.dynamics.diagnostics import corpus_windows
    from geosteer_paper.dynamics.critical import critical_study

    model, tok = load_model(a.model)
    ids = corpus_windows(tok, "heldout", a.tokens, 256)
    t0, c0 = time.perf_counter(), time.process_time()
    cand, summ = critical_study(model, ids, [a.layer], n_real=a.real, n_random=a.random, steps=a.steps,
                                log=print)
    total, cpu = time.perf_counter() - t0, time.process_time() - c0
    for s in summ:
        if s["layer"] != "all":
            print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in s.items()})
    print(f"one layer, 3 fields, {a.real}+{a.random} seeds, {a.steps} steps, {torch.get_num_threads()} threads: "
          f"{total:.1f} s wall, {cpu:.1f} s CPU time (bar: <= 120 s wall on 2 cores)")


if __name__ == "__main__":
    main()
