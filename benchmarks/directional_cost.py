"""Wall-clock overhead of each component-scaling intervention over the stock model (paper Table 7).

Three workloads on the same held-out tokens: **prefill** (one forward over ``--tokens`` tokens, no cache),
**cached decoding** (prefill untimed, then ``--decode-steps`` greedy steps of one token with the KV cache,
timed) and **train** (one full training step over ``--tokens`` tokens: forward with the loss, backward,
AdamW over every weight; the paper's training-time removal; opt in with ``--workloads train``). Each
intervention edits every layer (s∥ = 0, s⊥ = 1). Stock = transformers' own SDPA attention, no geosteer
handler. Per round and intervention: one stock run then one edited run, back to back (the
attention switch and attach/detach are untimed); the ratio of each pair, median and min–max over
``--rounds`` rounds after one warm-up round. Prints ``name: value`` lines; ``--out`` writes tidy rows.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/directional_cost.py --tokens 512 --rounds 5 --threads 1
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, set_attention  # noqa: E402

SITES = ("attn_out", "mlp_out", "resid_post", "value_full", "value_exclude_self", "diag_removal")


def _decode(m, ids, steps: int) -> float:
    """Prefill (untimed) then ``steps`` greedy cached steps; returns the seconds of the steps."""
    from transformers import DynamicCache

    cache = DynamicCache(config=m.config)
    out = m(input_ids=ids, use_cache=True, cache=cache)
    nxt = out.logits[:, -1:].argmax(-1)
    t0 = time.perf_counter()
    for _ in range(steps):
        out = m(input_ids=nxt, cache=cache, use_cache=True)
        nxt = out.logits[:, -1:].argmax(-1)
    return time.perf_counter() - t0


def _prefill(m, ids) -> float:
    t0 = time.perf_counter()
    m(input_ids=ids, use_cache=False)
    return time.perf_counter() - t0


def _train_step(m, ids, opt) -> float:
    """One full training step (every weight trains): forward with the next-token loss, backward, AdamW step.
    The optimiser's learning rate is 0, so the weights never change and every step does the same work."""
    t0 = time.perf_counter()
    with torch.enable_grad():
        m(input_ids=ids, labels=ids, use_cache=False).loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--decode-steps", type=int, default=32)
    ap.add_argument("--decode-prompt", type=int, default=128, help="prompt tokens before cached decoding")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--sites", default=",".join(SITES))
    ap.add_argument("--workloads", default="prefill,decode", help="prefill, decode, train (comma-separated)")
    ap.add_argument("--s-par", type=float, default=0.0)
    ap.add_argument("--out", default=None, help="tidy JSON rows")
    ap.add_argument("--profile", action="store_true",
                    help="instead of timing: torch.profiler of one prefill, stock and each site, top ops")
    a = ap.parse_args()

    from geosteer import load_model
    from geosteer.attention import use_geosteer_attention
    from geosteer.data.corpus import split_text
    from geosteer.directional.config import check_site
    from geosteer.directional.sites import ComponentScale
    from geosteer.eval.perplexity import encode
    from geosteer.interventions import steer

    torch.set_num_threads(a.threads)
    sites = [check_site(s.strip()) for s in a.sites.split(",") if s.strip()]
    m, tok = load_model(a.model)
    ids_all = encode(tok, split_text("heldout", max_chars=a.tokens * 10))
    prefill_ids = ids_all[: a.tokens][None]
    decode_ids = ids_all[: a.decode_prompt][None]
    opt = None
    if "train" in a.workloads.split(","):
        for p in m.parameters():
            p.requires_grad_(True)
        opt = torch.optim.AdamW(m.parameters(), lr=0.0)
    workloads = {"prefill": lambda: _prefill(m, prefill_ids),
                 "decode": lambda: _decode(m, decode_ids, a.decode_steps),
                 "train": lambda: _train_step(m, prefill_ids, opt)}
    workloads = {k: v for k, v in workloads.items() if k in a.workloads.split(",")}
    print(f"machine: {machine(a.threads)}")
    print(f"model: {a.model} prefill tokens: {prefill_ids.shape[1]} decode: {a.decode_prompt} prompt + "
          f"{a.decode_steps} steps, fp32, rounds: {a.rounds} (+1 warm-up), s_par {a.s_par}")

    def run(site: str | None, fn) -> float:
        if site is None:
            set_attention(m, "sdpa")
            return fn()
        use_geosteer_attention(m)
        with steer(m, ComponentScale(site, a.s_par, 1.0)):
            return fn()

    if a.profile:
        _profile(run, sites, workloads["prefill"])
        return
    times = {(w, s): [] for w in workloads for s in ["stock", *sites]}
    ratios = {(w, s): [] for w in workloads for s in sites}
    meta = {"model": a.model, "machine": machine(a.threads), "tokens": a.tokens, "decode_prompt": a.decode_prompt,
            "decode_steps": a.decode_steps, "rounds": a.rounds}
    with torch.no_grad(), contextlib.suppress(KeyboardInterrupt):
        for rnd in range(a.rounds + 1):
            for w, fn in workloads.items():
                for s in sites:
                    t_stock = run(None, fn)
                    t_edit = run(s, fn)
                    if rnd == 0:
                        continue  # warm-up
                    times[(w, "stock")].append(t_stock)
                    times[(w, s)].append(t_edit)
                    ratios[(w, s)].append(t_edit / t_stock)
            if rnd:
                rows = _summary(times, ratios, a.s_par)
                print(f"round {rnd} done", flush=True)
                if a.out:  # after every round, so a stopped run keeps what it measured
                    from geosteer.io_utils import write_records

                    write_records(a.out, rows, {**meta, "rounds_done": rnd})
    set_attention(m, "sdpa")
    for row in _summary(times, ratios, a.s_par):
        print(f"{row['workload']}_{row['site']}_ratio: {row['ratio_median']:.3f} (min {row['ratio_min']:.3f}, "
              f"max {row['ratio_max']:.3f}, {row['pairs']} pairs; edited {row['edited_s_median']:.3f} s, "
              f"stock {row['stock_s_median']:.3f} s)")


def _profile(run, sites, fn, top: int = 8) -> None:
    """Self CPU time per op of one prefill (after a warm-up), stock and each site: where the time goes."""
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad():
        for s in [None, *sites]:
            run(s, fn)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                run(s, fn)
            ev = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
            total = sum(e.self_cpu_time_total for e in ev) / 1e3
            print(f"profile {s or 'stock'}: total self CPU {total:.1f} ms")
            for e in ev[:top]:
                print(f"  {e.key}: {e.self_cpu_time_total / 1e3:.1f} ms ({e.count} calls)")


def _summary(times: dict, ratios: dict, s_par: float) -> list[dict]:
    rows = []
    for (w, s), r in ratios.items():
        if r:
            rows.append({"workload": w, "site": s, "s_par": s_par, "ratio_median": statistics.median(r),
                         "ratio_min": min(r), "ratio_max": max(r), "pairs": len(r),
                         "edited_s_median": statistics.median(times[(w, s)]),
                         "stock_s_median": statistics.median(times[(w, "stock")])})
    return rows


if __name__ == "__main__":
    main()
