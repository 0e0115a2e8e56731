"""Cost of attention surfaces vs the stock model, measured in one run (see shared BENCHMARKING.md).

Figures (ratios surfaces / stock; interleaved A, B, A, B after one warm-up each; median of --repeats
pairs with the min–max spread of the per-pair ratios; threads pinned):

- forward:   full forward at each of --tokens (default 512, 1k, 2k, 4k) tokens, no KV cache, logits for
             every position
- decode:    cached greedy decoding, time per new token after a --prompt-tokens (default 2k) prompt
- train:     one training step (forward + backward) at --train-seq × --train-batch tokens; surfaces: only
             the coefficients require grad; stock: the input embeddings require grad, so the backward
             also runs through every layer (no weight gradients on either side)
- memory:    peak RSS during a --mem-tokens forward (no cache), stock and surfaces each in its own process
             (the high-water mark is reset after loading, which has a higher peak of its own)

The surfaces are grid 8 over (-4, 4) on every layer with random non-zero coefficients (a trained artifact
with --surfaces), so no zero-layer shortcut applies. Prints one ``name: value`` line per figure (or JSON).

``--dtype float32,bfloat16`` measures each figure in each dtype (the model loaded in it; stock and surfaces of
a dtype interleaved as above, so each ratio compares the two in the same dtype and the same minutes); lines of
a dtype other than float32 end in ``_<dtype>``. Surfaces compute in fp32 from bf16/fp16 inputs (see
``geosteer.kernels.exact``), so on a CPU without native bf16 arithmetic the stock bf16 model is the slower
side and the bf16 ratio comes out below the fp32 one.

Beside each forward and decode ratio: its FLOP floor (``flop_floor``), the multiply-adds of the exact
factored form over those of the stock model, counting stock attention as causal. Per token, the stock model
costs its linear layers (the LM head included) plus 2·d per visible key per head and layer (q·k and a·v);
surfaces add d·K per visible key per head and layer (A·F multiplies K + 1 slices instead of one; with a
rank-r bank, r). The floor grows with the number of visible keys: it is the method's, not the kernel's.

    .venv/bin/python benchmarks/manifold_speed.py                 # all figures, 2 threads
    .venv/bin/python benchmarks/manifold_speed.py --only forward --repeats 7
    .venv/bin/python benchmarks/manifold_speed.py --only forward,decode --tokens 512 --dtype float32,bfloat16
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import paired, reset_peak_rss, status_mb  # noqa: E402

CLOCK = time.perf_counter  # --clock cpu: time.process_time (CPU time of this process; use with --threads 1)
CLOCK_NAME = "wall"


def _bank(model, surfaces: str | None, seed: int = 0):
    from geosteer import manifold

    if surfaces:
        return manifold.load(surfaces, model=model)
    bank = manifold.SurfaceBank(manifold.ManifoldConfig.for_model(model))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        bank.coefficients.copy_(torch.randn(bank.coefficients.shape, generator=g) * 0.05)
    return bank


def _ids(n: int, batch: int = 1, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(200, 40000, (batch, n), generator=g)


def _pairs(run_a, run_b, repeats: int) -> dict:
    """Interleaved timings (``_common.paired`` with this run's clock); ratios per pair."""
    r = paired(run_a, run_b, repeats, (CLOCK_NAME,))[CLOCK_NAME]
    return {"stock_s": r["a_s"], "surfaces_s": r["b_s"], "ratio": r["ratio"], "ratio_min": r["ratio_min"],
            "ratio_max": r["ratio_max"], "repeats": repeats}


def flop_floor(model, tokens: int, K: int, cache: int = 0, new: int | None = None) -> float:
    """Multiply-adds of surfaces / stock for ``new`` tokens (default ``tokens``) attending causally to
    ``cache`` earlier ones and each other (see the module docstring); ``K`` extra slices per pair."""
    from geosteer.models.anatomy import anatomy

    an = anatomy(model)
    n = tokens if new is None else new
    linear = sum(p.numel() for blk in an.blocks for p in blk.layer.parameters() if p.dim() == 2)
    linear += model.config.vocab_size * an.d_model  # the LM head (tied or not)
    pairs = n * cache + n * (n + 1) / 2  # visible (query, key) pairs, causal
    per_pair = an.n_layers * an.n_heads * an.head_dim
    stock = n * linear + pairs * per_pair * 2
    return (stock + pairs * per_pair * K) / stock


def bench_forward(model, bank, tokens: int, repeats: int) -> dict:
    ids = _ids(tokens)

    def stock():
        with torch.no_grad():
            model(ids, use_cache=False)

    def surf():
        rm = bank.attach(model)
        try:
            with torch.no_grad():
                model(ids, use_cache=False)
        finally:
            rm()

    floor = flop_floor(model, tokens, bank.rank or bank.K)
    return {"tokens": tokens, **_pairs(stock, surf, repeats), "flop_floor": round(floor, 3)}


def bench_decode(model, bank, prompt_tokens: int, new_tokens: int, repeats: int) -> dict:
    from transformers import DynamicCache

    ids = _ids(prompt_tokens, seed=1)

    def decode() -> float:
        with torch.no_grad():
            cache = DynamicCache()
            out = model(ids, cache=cache, use_cache=True)
            nxt = out.logits[:, -1:].argmax(-1)
            t = CLOCK()
            for _ in range(new_tokens):
                out = model(nxt, cache=cache, use_cache=True)
                nxt = out.logits[:, -1:].argmax(-1)
            return (CLOCK() - t) / new_tokens

    def surf() -> float:
        rm = bank.attach(model)
        try:
            return decode()
        finally:
            rm()

    decode()
    surf()
    ta, tb = [], []
    for _ in range(repeats):
        ta.append(decode())
        tb.append(surf())
    ratios = [b / a for a, b in zip(ta, tb, strict=True)]
    return {"prompt_tokens": prompt_tokens, "new_tokens": new_tokens, "stock_s_per_token": statistics.median(ta),
            "surfaces_s_per_token": statistics.median(tb), "ratio": statistics.median(ratios),
            "ratio_min": min(ratios), "ratio_max": max(ratios), "repeats": repeats,
            "flop_floor": round(flop_floor(model, 1, bank.rank or bank.K, cache=prompt_tokens + new_tokens // 2), 3)}


def bench_train(model, bank, seq: int, batch: int, repeats: int) -> dict:
    ids = _ids(seq, batch, seed=2)
    emb = model.get_input_embeddings()

    def stock():
        x = emb(ids).detach().requires_grad_(True)
        loss = model(inputs_embeds=x, labels=ids, use_cache=False).loss
        loss.backward()

    def surf():
        bank.coefficients.requires_grad_(True)
        bank.coefficients.grad = None
        rm = bank.attach(model)
        try:
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss
            loss.backward()
        finally:
            rm()
            bank.coefficients.requires_grad_(False)

    return {"seq_len": seq, "batch": batch, **_pairs(stock, surf, repeats)}


def _mem_child(kind: str, model_name: str, tokens: int, surfaces: str | None, threads: int,
               dtype: str = "float32") -> None:
    import gc

    torch.set_num_threads(threads)
    from geosteer import load_model

    model, _ = load_model(model_name, dtype=dtype)
    ids = _ids(tokens)
    if kind == "surfaces":
        bank = _bank(model, surfaces)
        bank.attach(model)
        from geosteer.kernels import ext

        ext.get()
    gc.collect()
    before = reset_peak_rss()  # loading has its own (higher) peak: only the forward counts
    with torch.no_grad():
        model(ids, use_cache=False)
    peak = status_mb("VmHWM")
    print(json.dumps({"kind": kind, "peak_rss_mb": peak, "before_forward_mb": before}))


def bench_memory(model_name: str, tokens: int, surfaces: str | None, threads: int, dtype: str = "float32") -> dict:
    res = {}
    for kind in ("stock", "surfaces"):
        cmd = [sys.executable, __file__, "--mem-child", kind, "--model", model_name, "--mem-tokens", str(tokens),
               "--threads", str(threads), "--dtype", dtype]
        if surfaces:
            cmd += ["--surfaces", surfaces]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        res[kind] = json.loads(out.stdout.strip().splitlines()[-1])
    s, m = res["stock"], res["surfaces"]
    return {"tokens": tokens, "stock_peak_mb": round(s["peak_rss_mb"], 1),
            "surfaces_peak_mb": round(m["peak_rss_mb"], 1),
            "ratio": m["peak_rss_mb"] / s["peak_rss_mb"],
            "stock_forward_increase_mb": round(s["peak_rss_mb"] - s["before_forward_mb"], 1),
            "surfaces_forward_increase_mb": round(m["peak_rss_mb"] - m["before_forward_mb"], 1)}


DTYPES = ("float32", "bfloat16", "float16")


def _parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--surfaces", default=None, help="a trained artifact instead of random coefficients")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tokens", default="512,1024,2048,4096", help="comma list of forward lengths")
    ap.add_argument("--prompt-tokens", type=int, default=2048)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--train-seq", type=int, default=128)
    ap.add_argument("--train-batch", type=int, default=8)
    ap.add_argument("--mem-tokens", type=int, default=4096)
    ap.add_argument("--only", default="forward,decode,train,memory")
    ap.add_argument("--dtype", default="float32",
                    help=f"comma list of model dtypes, each measured in turn ({', '.join(DTYPES)})")
    ap.add_argument("--rank", type=int, default=None,
                    help="rank-r surfaces (low_rank(r): the r+1-slice path, compiled on the CPU in fp32)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall time (default) or this process's CPU time (robust on a loaded machine; "
                         "meaningful with --threads 1)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--mem-child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    a.dtypes = [x.strip() for x in a.dtype.split(",") if x.strip()]
    bad = [x for x in a.dtypes if x not in DTYPES]
    if bad or not a.dtypes:
        ap.error(f"--dtype {a.dtype!r}: give a comma list of {', '.join(DTYPES)}")
    return a


def _run_dtype(a, dtype: str, only: list[str], say) -> dict:
    """Every figure in ``only`` for the model loaded in ``dtype``; the line names end in _<dtype> unless fp32."""
    from geosteer import load_model

    tag = "" if dtype == "float32" else f"_{dtype}"
    out: dict = {"dtype": dtype}
    model, _ = load_model(a.model, dtype=dtype)
    bank = _bank(model, a.surfaces)
    if a.rank:
        bank = bank.low_rank(a.rank)
    if "forward" in only:
        out["forward"] = []
        for n in (int(x) for x in a.tokens.split(",")):
            r = bench_forward(model, bank, n, a.repeats)
            out["forward"].append(r)
            say(f"forward_{n}_ratio{tag}", f"{r['ratio']:.3f} (floor {r['flop_floor']:.3f}; min {r['ratio_min']:.3f}, "
                f"max {r['ratio_max']:.3f}; stock {r['stock_s']:.3f} s, surfaces {r['surfaces_s']:.3f} s)")
    if "decode" in only:
        r = out["decode"] = bench_decode(model, bank, a.prompt_tokens, a.new_tokens, a.repeats)
        say(f"decode_{a.prompt_tokens}_per_token_ratio{tag}", f"{r['ratio']:.3f} (floor {r['flop_floor']:.3f}; "
            f"min {r['ratio_min']:.3f}, max {r['ratio_max']:.3f}; "
            f"stock {r['stock_s_per_token'] * 1e3:.1f} ms, surfaces {r['surfaces_s_per_token'] * 1e3:.1f} ms)")
    if "train" in only:
        r = out["train"] = bench_train(model, bank, a.train_seq, a.train_batch, a.repeats)
        say(f"train_step_ratio{tag}", f"{r['ratio']:.3f} (min {r['ratio_min']:.3f}, max {r['ratio_max']:.3f}; "
            f"stock {r['stock_s']:.3f} s, surfaces {r['surfaces_s']:.3f} s)")
    del model, bank
    if "memory" in only:
        r = out["memory"] = bench_memory(a.model, a.mem_tokens, a.surfaces, a.threads, dtype)
        say(f"peak_memory_{a.mem_tokens}_ratio{tag}", f"{r['ratio']:.3f} (stock {r['stock_peak_mb']:.0f} MB, "
            f"surfaces {r['surfaces_peak_mb']:.0f} MB; forward increase {r['stock_forward_increase_mb']:.0f} "
            f"vs {r['surfaces_forward_increase_mb']:.0f} MB)")
    return out


def main(argv=None) -> None:
    a = _parse_args(argv)
    if a.mem_child:
        _mem_child(a.mem_child, a.model, a.mem_tokens, a.surfaces, a.threads, a.dtypes[0])
        return
    torch.set_num_threads(a.threads)
    global CLOCK, CLOCK_NAME
    CLOCK = time.process_time if a.clock == "cpu" else time.perf_counter
    CLOCK_NAME = a.clock
    only = [x.strip() for x in a.only.split(",") if x.strip()]
    machine = {"cores": os.cpu_count(), "threads": a.threads, "clock": a.clock,
               "load_average": os.getloadavg()[0], "torch": torch.__version__,
               "python": platform.python_version(), "model": a.model, "dtypes": a.dtypes,
               "surfaces": a.surfaces or "random, grid 8, range (-4, 4), all layers"}
    if a.rank:
        machine["rank"] = a.rank
    say = (lambda k, v: None) if a.json else (lambda k, v: print(f"{k}: {v}", flush=True))
    for k, v in machine.items():
        say(k, v)
    if "forward" in only or "decode" in only:
        from geosteer.kernels import ext

        ext.get()
        machine["compiled_kernels"] = ext.status()
        say("compiled_kernels", ext.status())
    runs = [_run_dtype(a, dt, only, say) for dt in a.dtypes]
    machine["load_average_end"] = os.getloadavg()[0]
    say("load_average_end", machine["load_average_end"])
    if a.json:
        print(json.dumps({"machine": machine, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
