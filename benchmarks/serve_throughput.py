"""Throughput of steered serving: vLLM stock vs vLLM + recipes vs geosteer's batched HF generation, one run.

    .venv-serve/bin/python benchmarks/serve_throughput.py --batches 1,16,64 --new 128 --out serve.json

Needs the serving environment (``make serve``). Per batch size: tokens/s of greedy generation (batch × new
tokens / wall time), time to first token (a generate of one token: the prefill of the whole batch), and
the KV-cache bytes per token of each engine (its KV cache size over its token capacity, as vLLM sized it).
Prompts: held-out corpus openings, ``--prompt-tokens`` tokens each (the same ids on both paths). All runs
are eager (the steered layers pick each request's rows in Python), fp32, on the CPU build here. The
recipes: the shipped surfaces, ``BUILT_IN`` (a directional and an FFN recipe on every layer), and any
``--recipe NAME=DIR``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine in this process: one clock, sizes readable
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


# the directional and FFN recipes timed beside the surfaces (recipe keys as on the geosteer command line)
BUILT_IN = {"directional": dict(scale_site="resid_attn", scale_par=1.3, scale_perp=0.9, scale_layers="all"),
            "ffn": dict(mlp_variant="tangential", mlp_layers="all", alpha_mlp=1.1)}


def _prompts(tok, n: int, length: int) -> list[list[int]]:
    from tests.serve.helpers import prompt_ids

    base = prompt_ids(tok, min(n, 20), length)
    return [base[i % len(base)] for i in range(n)]


def _vllm_run(llm, prompts, new: int, recipe: str | None) -> tuple[float, float]:
    """(seconds for ``new`` greedy tokens per prompt, seconds for the first token) of one batch."""
    from geosteer.serve import sampling

    reqs = [{"prompt_token_ids": p} for p in prompts]
    t = time.perf_counter()
    llm.generate(reqs, sampling(recipe, max_tokens=1, temperature=0.0), use_tqdm=False)
    ttft = time.perf_counter() - t
    t = time.perf_counter()
    llm.generate(reqs, sampling(recipe, max_tokens=new, temperature=0.0, ignore_eos=True), use_tqdm=False)
    return time.perf_counter() - t, ttft


def _kv_bytes_per_token(llm) -> float | None:
    cfg = llm.llm_engine.vllm_config.cache_config
    blocks, size = getattr(cfg, "num_gpu_blocks", None), cfg.block_size
    space = float(os.environ.get("VLLM_CPU_KVCACHE_SPACE", "0")) * 2**30
    return space / (blocks * size) if blocks and space else None


def _hf_run(model, prompts, new: int, interventions) -> tuple[float, float]:
    import torch

    import geosteer

    ids = torch.tensor(prompts)
    with torch.no_grad(), geosteer.steer(model, *interventions):
        t = time.perf_counter()
        model(ids)
        ttft = time.perf_counter() - t
        t = time.perf_counter()
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new,
                       do_sample=False, pad_token_id=0)
        return time.perf_counter() - t, ttft


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="smollm2")
    p.add_argument("--surfaces", default=str(ROOT / "artifacts" / "smollm2-surfaces-all"))
    p.add_argument("--recipe", action="append", default=[], help="NAME=DIR: another recipe to time on vLLM")
    p.add_argument("--batches", default="1,16,64")
    p.add_argument("--new", type=int, default=128)
    p.add_argument("--prompt-tokens", type=int, default=32)
    p.add_argument("--no-hf", action="store_true", help="skip the HF path")
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    from geosteer.errors import one_line_errors

    with one_line_errors():
        return _run(a)


def _run(a) -> dict:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
    from geosteer.models.loading import load_model
    from geosteer.serve import steered_llm
    from geosteer.serve.plan import parse_recipe_args, spec_of

    batches = [int(b) for b in a.batches.split(",")]
    import tempfile

    from geosteer.recipe import InterventionSpec, save_recipe

    tmp = tempfile.TemporaryDirectory()
    recipes = {name: str(save_recipe(Path(tmp.name) / name, InterventionSpec(**keys), base_model=a.model))
               for name, keys in BUILT_IN.items()}
    recipes.update(parse_recipe_args(a.recipe))
    model, tok = load_model(a.model)
    prompts = {b: _prompts(tok, b, a.prompt_tokens) for b in batches}
    kw = dict(gpu_memory_utilization=0.15, max_model_len=a.prompt_tokens + a.new + 8, max_num_seqs=max(batches),
              enforce_eager=True, seed=0)
    rows = []

    def record(engine, setting, b, secs, ttft, kv):
        rows.append({"engine": engine, "setting": setting, "batch": b, "tokens_per_s": b * a.new / secs,
                     "ttft_s": ttft, "kv_bytes_per_token": kv})
        print(json.dumps(rows[-1]), flush=True)

    # one engine per kind, so that a recipe's time is not the cost of another's extra value channels
    others = {k: v for k, v in recipes.items() if k != "surfaces"}
    for engine_recipes in (None, {"surfaces": a.surfaces}, others or None)[: 3 if others else 2]:
        llm = steered_llm(a.model, engine_recipes, **kw)
        kv = _kv_bytes_per_token(llm)
        _vllm_run(llm, prompts[batches[0]], 4, None)  # warm-up
        for name in [None] if engine_recipes is None else list(engine_recipes):
            for b in batches:
                record("vllm", name or "stock", b, *_vllm_run(llm, prompts[b], a.new, name), kv)
        del llm
        gc.collect()
    if not a.no_hf:
        spec, _ = spec_of(a.surfaces)
        inter = spec.build(model)
        for b in batches:
            record("hf", "surfaces", b, *_hf_run(model, prompts[b], a.new, inter), None)
    out = {"command": " ".join(["python", *sys.argv]), "rows": rows, "ratios": _ratios(rows)}
    print(json.dumps(out["ratios"], indent=1))
    if a.out:
        from geosteer.io_utils import atomic_write_text

        atomic_write_text(a.out, json.dumps(out, indent=1) + "\n")
    return out


def _ratios(rows: list[dict]) -> dict:
    """Per batch: each vLLM recipe's time over vLLM stock's, and vLLM surfaces' tokens/s over the HF path's."""
    by = {(r["engine"], r["setting"], r["batch"]): r["tokens_per_s"] for r in rows}
    out: dict = {}
    for (engine, setting, b), tps in by.items():
        stock = by.get(("vllm", "stock", b))
        if engine == "vllm" and setting != "stock" and stock:
            out[f"{setting}_time_vs_vllm_stock@{b}"] = round(stock / tps, 3)
        if engine == "hf":
            v = by.get(("vllm", "surfaces", b))
            if v:
                out[f"vllm_surfaces_vs_hf_tokens_per_s@{b}"] = round(v / tps, 3)
    return out


if __name__ == "__main__":
    main()
