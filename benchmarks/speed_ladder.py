"""Surfaces' cost relative to stock up the model ladder, and the attention share that sets it.

For each model (default: SmolLM2-135M, Gemma-3-270m, Qwen2.5-Coder-0.5B, Qwen2.5-Coder-1.5B; a model whose
packages are not installed is skipped), in one process per model run, fp32, threads pinned:

- forward:  a full forward of --tokens (default 512) tokens, no KV cache, surfaces ÷ stock
            (``manifold_speed.bench_forward``: interleaved stock, surfaces, stock, … after one warm-up each,
            median of --repeats pairs with the min–max of the per-pair ratios)
- decode:   cached greedy decoding, time per new token after a --prompt-tokens prompt, surfaces ÷ stock
            (``manifold_speed.bench_decode``, interleaved the same way)
- attention share of a stock forward of --tokens tokens:
  ``flops``: the multiply-adds of the attention products (q·k and a·v, causal) over all of the stock model's
             (the count behind ``manifold_speed.flop_floor``: linear layers, LM head included, plus 2·d per
             visible key per head and layer); the same share for one decode step after the prompt
  ``time``:  the measured time inside stock attention (transformers' SDPA, timed through a geosteer attention
             handler on every layer) over the whole forward's, median of --repeats forwards
- flop_floor beside each measured ratio: surfaces' multiply-adds ÷ stock's. With K extra slices per pair the
  floor is 1 + share·K/2, so the overhead follows the attention share.

The surfaces are random (grid 8 over (-4, 4), K = 11, every layer, coefficients 0.05·N(0, 1), seed 0), so no
zero-layer shortcut applies. ``--clock cpu --threads 1`` times this process's CPU time instead of the wall
clock: steadier on a machine that other jobs load. Each model's record is written to --out as soon as it
finishes (the file keeps the other models' records; a model already there is skipped unless --force), with
the load average at its start and end.

    nohup nice -n 10 .venv/bin/python benchmarks/speed_ladder.py --models smollm2,qwen2.5-0.5b > ladder.log &
    .venv/bin/python benchmarks/speed_ladder.py --threads 1 --clock cpu --repeats 3
    .venv/bin/python benchmarks/speed_ladder.py --models smollm2 --repeats 3 --out /tmp/l.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import manifold_speed  # noqa: E402
from manifold_speed import _bank, _ids, bench_decode, bench_forward, flop_floor  # noqa: E402

LADDER = ("smollm2", "gemma3-270m", "qwen2.5-0.5b", "qwen2.5-1.5b")
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "docs" / "results" / "benchmarks" / "speed_ladder.json"


def attention_flop_share(model, tokens: int, cache: int = 0, new: int | None = None) -> float:
    """The attention products' share of a stock model's multiply-adds (the stock count of ``flop_floor``):
    with K extra slices per pair, ``flop_floor = 1 + share * K / 2``."""
    K = 2.0  # with K = 2 the surfaces add exactly the attention products' count
    return flop_floor(model, tokens, K, cache=cache, new=new) - 1.0


def attention_time_share(model, tokens: int, repeats: int) -> dict:
    """Time inside stock attention over a stock forward's time, per forward (median and spread)."""
    from geosteer.attention import attach_handlers

    ids = _ids(tokens)
    clock = manifold_speed.CLOCK
    spent = [0.0]

    def make(_layer):
        def timed(call, proceed):
            t = clock()
            out = proceed(call)
            spent[0] += clock() - t
            return out
        return timed

    remove = attach_handlers(model, None, make)
    shares, totals = [], []
    try:
        for i in range(repeats + 1):
            spent[0] = 0.0
            t = clock()
            with torch.no_grad():
                model(ids, use_cache=False)
            total = clock() - t
            if i:  # the first is a warm-up
                shares.append(spent[0] / total)
                totals.append(total)
    finally:
        remove()
    return {"share": statistics.median(shares), "share_min": min(shares), "share_max": max(shares),
            "forward_s": statistics.median(totals), "repeats": repeats}


def shape(model) -> dict:
    from geosteer.models.anatomy import anatomy

    an = anatomy(model)
    params = sum(p.numel() for p in model.parameters())
    return {"params_m": round(params / 1e6, 1), "layers": an.n_layers, "d_model": an.d_model,
            "heads": an.n_heads, "kv_heads": an.n_kv_heads, "head_dim": an.head_dim,
            "vocab": model.config.vocab_size}


def run_model(name: str, a) -> dict:
    from geosteer import load_model
    from geosteer.kernels import ext

    rec: dict = {"model": name, "dtype": "float32", "threads": a.threads, "clock": a.clock,
                 "load_average_start": os.getloadavg()[0],
                 "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    model, _ = load_model(name, dtype=torch.float32)
    bank = _bank(model, None)
    K = bank.K
    rec.update(shape=shape(model), K=K, compiled_kernels=ext.status())
    n, p = a.tokens, a.prompt_tokens
    rec["attention_flop_share_forward"] = round(attention_flop_share(model, n), 4)
    rec["attention_flop_share_decode"] = round(attention_flop_share(model, 1, cache=p + a.new_tokens // 2), 4)
    rec["attention_time_share_forward"] = attention_time_share(model, n, a.repeats)
    rec["forward"] = bench_forward(model, bank, n, a.repeats)
    rec["decode"] = bench_decode(model, bank, p, a.new_tokens, a.repeats)
    rec["load_average_end"] = os.getloadavg()[0]
    rec["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    del model, bank
    return rec


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def summary(rec: dict) -> str:
    f, d, ts = rec["forward"], rec["decode"], rec["attention_time_share_forward"]
    return (f"{rec['model']}: forward_{f['tokens']} {f['ratio']:.3f} (floor {f['flop_floor']:.3f}; "
            f"{f['ratio_min']:.3f}-{f['ratio_max']:.3f}; stock {f['stock_s']:.3f} s), "
            f"decode {d['ratio']:.3f} (floor {d['flop_floor']:.3f}; {d['ratio_min']:.3f}-{d['ratio_max']:.3f}; "
            f"stock {d['stock_s_per_token'] * 1e3:.1f} ms/token), attention share of a stock forward: "
            f"flops {rec['attention_flop_share_forward']:.3f}, time {ts['share']:.3f}; "
            f"load average {rec['load_average_start']:.1f} -> {rec['load_average_end']:.1f}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(LADDER))
    ap.add_argument("--tokens", type=int, default=512, help="forward length")
    ap.add_argument("--prompt-tokens", type=int, default=512, help="decode: prompt length")
    ap.add_argument("--new-tokens", type=int, default=16, help="decode: new tokens timed per run")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall time, or this process's CPU time (steadier on a loaded machine; with --threads 1)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--force", action="store_true", help="measure models already in --out again")
    a = ap.parse_args(argv)
    from geosteer.kernels import ext
    from geosteer.models import loading

    torch.set_num_threads(a.threads)
    manifold_speed.CLOCK = time.process_time if a.clock == "cpu" else time.perf_counter
    manifold_speed.CLOCK_NAME = a.clock
    ext.get()
    data = json.loads(a.out.read_text()) if a.out.is_file() else {}
    data["machine"] = {"cores": os.cpu_count(), "torch": torch.__version__, "python": platform.python_version(),
                       "command": "benchmarks/speed_ladder.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    data.setdefault("models", {})
    for name in (m.strip() for m in a.models.split(",") if m.strip()):
        if name in data["models"] and not a.force:
            print(f"{name}: in {a.out} already (--force measures it again)", flush=True)
            continue
        if name in loading.BUNDLED and not loading._bundled_here(name):
            print(f"{name}: skipped, its packages are not installed", flush=True)
            continue
        rec = run_model(name, a)
        data["models"][name] = rec
        _write(a.out, data)
        print(summary(rec), flush=True)


if __name__ == "__main__":
    main()
