"""Throughput of steered serving: vLLM stock vs vLLM + recipes vs geosteer's batched HF generation, one run.

    .venv-serve/bin/python benchmarks/serve_throughput.py --batches 1,16,64 --new 128 --out serve.json

Needs the serving environment (``make serve``). Per batch size: tokens/s of greedy generation (batch × new
tokens / wall time), time to first token (a generate of one token: the prefill of the whole batch), and
the KV-cache bytes per token of each engine (its KV cache size over its token capacity, as vLLM sized it).
Prompts: held-out corpus openings, ``--prompt-tokens`` tokens each (the same ids on both paths). All runs
are eager by default; ``--compiled`` leaves vLLM's compiled path on (torch.compile on the CPU build, CUDA
graphs on a GPU) for vLLM stock and for every steered engine whose recipes run inside the graph
(``geosteer_vllm.graph``; where a recipe cannot, its engine chooses eager itself);
``--stock-compiled`` compiles vLLM stock only. fp32, on the CPU build here. The recipes: the shipped surfaces, a random
steering vector on every layer (``vector_all``), the same vector as inline recipes at four scales mixed
in one batch (``inline_mixed``: request i takes scale ``INLINE_SCALES[i % 4]``), ``BUILT_IN`` (a
directional and an FFN recipe on every layer), and any ``--recipe NAME=DIR``.

Runs are interleaved so that a ratio compares runs made under the same machine load: two phases, each with its
engines alive at once and, per batch size, one run of each setting in turn — (1) vLLM stock, vLLM + surfaces, +
the vector, + the inline mix and the HF path; (2) vLLM stock again and the engine of the
other recipes. Each ratio uses the stock run of its own phase. ``--new-at B=N`` gives batch B its own number
of new tokens (a shorter run where a full one would take too long); ``--hf-batches`` limits the (slow) HF path
to some batch sizes. Each row records the one-minute load average when it finished and, for vLLM, the CPU
seconds this process spent on the run (the engines run in it, one thread each), to which other jobs on the
machine add nothing; ``cpu_time`` ratios compare those. ``--repeats N`` runs each
interleaved round N times; the ratios use the medians. Each row records whether its engine ran compiled.
``--with-channels`` adds, in phase 1, an engine serving the same surfaces on the channel layout
(``GEOSTEER_SERVE_CHANNELS=1``: every KV head carried as 1 + K channels) beside the default shared-key path
(``geosteer_vllm.shared_key``).

``--surfaces-only`` times vLLM stock and vLLM + surfaces alone (no vector, inline mix, other recipes or HF
path; the model's weights load only inside vLLM) and records the FLOP floor of the generation beside the
ratios (``served_flop_floor``). ``--surfaces random`` serves fresh surfaces instead of an artifact: grid 8 over
(-4, 4) (K = 11) on every layer, coefficients 0.05·N(0, 1), seed 0, as ``speed_ladder.py`` times them (the
cost does not depend on the trained values). ``--steered-stock`` also times stock requests (no recipe) on the
steered engine (``stock_on_steered``); ``--no-stock-engine`` then leaves the vLLM stock engine out, for a
model of which two engines do not fit in memory. ``--before-rounds CMD`` / ``--after-rounds CMD`` run a command
once the engines are up and warm, before the timed rounds, and after them (also when a round fails): e.g. to
hold other jobs on the machine while timing only. ``serve_ladder.py`` runs this per model of the ladder.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine in this process: one clock, sizes readable
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


# the directional and FFN recipes timed beside the surfaces (recipe keys as on the geosteer command line)
BUILT_IN = {"directional": dict(scale_site="attn_out", scale_par=1.3, scale_perp=0.9, scale_layers="all"),
            "ffn": dict(mlp_variant="tangential", mlp_layers="all", alpha_mlp=1.1)}
INLINE_SCALES = (1.0, 2.0, 3.0, 4.0)  # the inline recipes of the mixed batch: the vector at these scales
_CPU: list[float] = []  # CPU seconds of the last vLLM run (the engine runs in this process)


def _vector_all(model, folder: Path) -> str:
    """A random steering vector on every layer (resid_post, norm 1, seed 0), saved as an artifact."""
    import torch

    from geosteer.models.anatomy import anatomy
    from geosteer.models.loading import model_id
    from geosteer.vectors.apply import SteeringVectors

    an = anatomy(model)
    gen = torch.Generator().manual_seed(0)
    vecs = {i: torch.nn.functional.normalize(torch.randn(an.d_model, generator=gen), dim=0)
            for i in range(an.n_layers)}
    return str(SteeringVectors(vecs, base_model=model_id(model), d_model=an.d_model, n_layers=an.n_layers)
               .save(folder))


def weightless(model: str):
    """(a meta-device copy of ``model`` named as the engine checks recipes, its tokenizer): no weights load."""
    from transformers import AutoConfig, AutoTokenizer

    from geosteer_vllm.engine import resolve_model
    from geosteer_vllm.plan import meta_model

    folder, name = resolve_model(model)
    meta = meta_model(AutoConfig.from_pretrained(folder))
    meta.config._geosteer_name = name
    return meta, AutoTokenizer.from_pretrained(folder)


def random_surfaces(model, folder: Path, seed: int = 0) -> str:
    """Fresh surfaces on every layer of ``model`` (grid 8 over (-4, 4), coefficients 0.05·N(0, 1)), saved."""
    import torch

    from geosteer.manifold import ManifoldConfig, SurfaceBank

    bank = SurfaceBank(ManifoldConfig.for_model(model))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        bank.coefficients.copy_(torch.randn(bank.coefficients.shape, generator=gen) * 0.05)
    return str(bank.save(folder))


def served_flop_floor(model, prompt: int, new: int, K: int, layers: int) -> float:
    """Multiply-adds of a served generation with surfaces on ``layers`` layers over stock's: ``new`` greedy
    tokens after a ``prompt``-token prompt run prompt + new - 1 tokens through the layers (the decoder layers'
    matrices), ``new`` through the LM head (vLLM computes logits only where it samples), and each visible
    (query, key) pair costs 2·head_dim per head and layer in stock attention, K·head_dim more per head on a
    surfaces layer (the count of ``manifold_speed.flop_floor``)."""
    from geosteer.models.anatomy import anatomy

    an = anatomy(model)
    tokens = prompt + new - 1
    linear = sum(p.numel() for blk in an.blocks for p in blk.layer.parameters() if p.dim() == 2)
    pairs = tokens * (tokens + 1) / 2
    per_pair = an.n_heads * an.head_dim  # per layer
    stock = tokens * linear + new * model.config.vocab_size * an.d_model + pairs * an.n_layers * per_pair * 2
    return (stock + pairs * layers * per_pair * K) / stock


def _prompts(tok, n: int, length: int) -> list[list[int]]:
    from tests.serve.helpers import prompt_ids

    base = prompt_ids(tok, min(n, 20), length)
    return [base[i % len(base)] for i in range(n)]


def _vllm_run(llm, prompts, new: int, recipe) -> tuple[float, float]:
    """(seconds for ``new`` greedy tokens per prompt, seconds for the first token) of one batch. ``recipe``:
    a name, an inline recipe (a dict), None (stock), or a list of those, one per request in turn (a mixed batch)."""
    from geosteer_vllm import sampling

    reqs = [{"prompt_token_ids": p} for p in prompts]
    mixed = recipe if isinstance(recipe, list) else [recipe]

    def params(**kw):
        return [sampling(mixed[i % len(mixed)], **kw) for i in range(len(reqs))]

    t = time.perf_counter()
    llm.generate(reqs, params(max_tokens=1, temperature=0.0), use_tqdm=False)
    ttft = time.perf_counter() - t
    t, c = time.perf_counter(), time.process_time()
    llm.generate(reqs, params(max_tokens=new, temperature=0.0, ignore_eos=True), use_tqdm=False)
    _CPU[:] = [time.process_time() - c]  # this process's CPU time: the engine runs in it
    return time.perf_counter() - t, ttft


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


def _hook(cmd: str | None) -> None:
    """Run ``cmd`` (split as a shell would, no shell); a failure stops the benchmark."""
    if cmd:
        rc = subprocess.run(shlex.split(cmd)).returncode
        if rc:
            raise RuntimeError(f"'{cmd}' exited {rc}")


def _pairs(items: list[str], what: str) -> dict[int, int]:
    out = {}
    for item in items:
        b, sep, n = item.partition("=")
        if not sep or not b.isdigit() or not n.isdigit() or int(n) < 1:
            raise ValueError(f"{what} needs BATCH=TOKENS with positive integers (got '{item}')")
        out[int(b)] = int(n)
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="smollm2")
    p.add_argument("--surfaces", default=str(ROOT / "artifacts" / "smollm2-surfaces-all"),
                   help="a surfaces folder for --model, or 'random' (fresh surfaces on every layer, seed 0)")
    p.add_argument("--surfaces-only", action="store_true",
                   help="time vLLM stock and vLLM + surfaces only (no HF weights load), with the FLOP floor")
    p.add_argument("--recipe", action="append", default=[], help="NAME=DIR: another recipe to time on vLLM")
    p.add_argument("--batches", default="1,16,64")
    p.add_argument("--new", type=int, default=128)
    p.add_argument("--new-at", action="append", default=[], metavar="B=N",
                   help="batch B generates N new tokens instead of --new (repeatable)")
    p.add_argument("--hf-batches", help="batch sizes of the HF path (default: --batches)")
    p.add_argument("--prompt-tokens", type=int, default=32)
    p.add_argument("--no-hf", action="store_true", help="skip the HF path")
    p.add_argument("--no-built-in", action="store_true", help="skip the built-in directional and FFN recipes")
    p.add_argument("--repeats", type=int, default=1, help="interleaved rounds per batch size (ratios: medians)")
    p.add_argument("--with-channels", action="store_true",
                   help="also time the surfaces on the channel layout (phase 1)")
    p.add_argument("--steered-stock", action="store_true",
                   help="also time stock requests on the steered engine (--surfaces-only)")
    p.add_argument("--no-stock-engine", action="store_true",
                   help="no separate vLLM stock engine (with --steered-stock: one engine in memory)")
    p.add_argument("--before-rounds", metavar="CMD", help="a command to run before the timed rounds (engines warm)")
    p.add_argument("--after-rounds", metavar="CMD", help="a command to run after them (also on failure)")
    p.add_argument("--stock-compiled", action="store_true",
                   help="run vLLM stock with its compiled graphs (the steered engines stay eager)")
    p.add_argument("--compiled", action="store_true",
                   help="leave vLLM's compiled path on for stock and for every steered engine that can run it")
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    if a.repeats < 1:
        p.error(f"--repeats must be a positive integer (got {a.repeats})")
    if a.surfaces_only and a.recipe:
        p.error("--surfaces-only times the surfaces alone: drop --recipe")
    if (a.steered_stock or a.no_stock_engine) and not a.surfaces_only:
        p.error("--steered-stock and --no-stock-engine go with --surfaces-only")
    if a.no_stock_engine and not a.steered_stock:
        p.error("--no-stock-engine needs --steered-stock (the stock requests then run on the steered engine)")
    if a.surfaces != "random" and not Path(a.surfaces).is_dir():
        p.error(f"--surfaces: no such folder: {a.surfaces} (a surfaces folder, or 'random')")
    from geosteer.errors import one_line_errors

    with one_line_errors():
        return _run(a)


def _engine(model: str, recipes: dict | None, kv_gib: int, kw: dict, channels: bool = False, inline=None):
    """A vLLM engine with its own KV-cache space (GiB), warmed up; (llm, KV bytes per token). ``channels``:
    its surfaces layers take the channel layout; ``inline``: it also takes inline recipes under that policy."""
    from geosteer_vllm import steered_llm

    os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(int(kv_gib))
    if channels:
        os.environ["GEOSTEER_SERVE_CHANNELS"] = "1"
    try:
        llm = steered_llm(model, recipes, inline, **kw)
    finally:
        os.environ.pop("GEOSTEER_SERVE_CHANNELS", None)
    cfg = llm.llm_engine.vllm_config.cache_config
    blocks = getattr(cfg, "num_gpu_blocks", None)
    kv = kv_gib * 2**30 / (blocks * cfg.block_size) if blocks else None
    return llm, kv


def _setup(a, tmp: Path) -> tuple:
    """(model, tokenizer, {name: recipe folder}, the inline policy or None): what this run serves. With
    ``--surfaces-only`` the model is weightless (its weights load inside vLLM only) and serves the surfaces."""
    from geosteer.models.loading import load_model
    from geosteer.recipe import InterventionSpec, save_recipe
    from geosteer_vllm.inline import Policy
    from geosteer_vllm.plan import parse_recipe_args

    model, tok = weightless(a.model) if a.surfaces_only else load_model(a.model)
    surfaces = random_surfaces(model, tmp / "random-surfaces") if a.surfaces == "random" else a.surfaces
    if a.surfaces_only:
        return model, tok, {"surfaces": surfaces}, None
    recipes = {name: str(save_recipe(tmp / name, InterventionSpec(**keys), base_model=a.model))
               for name, keys in ({} if a.no_built_in else BUILT_IN).items()}
    recipes.update(parse_recipe_args(a.recipe))
    vec = _vector_all(model, tmp / "vector-all")
    recipes["vector_all"] = str(save_recipe(tmp / "vector_all", InterventionSpec(vectors=vec), base_model=a.model))
    return model, tok, {**recipes, "surfaces": surfaces}, Policy({"all": vec})


def _floors(model, surfaces: str, prompt: int, new_of: dict[int, int], batches: list[int]) -> dict:
    """The FLOP floor of each batch's generation with these surfaces (``served_flop_floor``)."""
    from geosteer.artifacts.config import read_config

    cfg = read_config(surfaces)
    return {f"surfaces@{b}": round(served_flop_floor(model, prompt, new_of[b], cfg["K"], len(cfg["layers"])), 4)
            for b in batches}


def _run(a) -> dict:
    import tempfile

    from geosteer_vllm.plan import spec_of

    batches = [int(b) for b in a.batches.split(",")]
    hf_batches = [] if a.no_hf or a.surfaces_only else [int(b) for b in (a.hf_batches or a.batches).split(",")]
    new_of = {b: a.new for b in {*batches, *hf_batches}}
    new_of.update(_pairs(a.new_at, "--new-at"))
    tmp = tempfile.TemporaryDirectory()
    model, tok, recipes, policy = _setup(a, Path(tmp.name))
    inline = [{"vectors": "all", "vector_scale": s} for s in INLINE_SCALES]
    prompts = {b: _prompts(tok, b, a.prompt_tokens) for b in new_of}
    kw = dict(gpu_memory_utilization=0.15, max_model_len=a.prompt_tokens + max(new_of.values()) + 8,
              max_num_seqs=max(new_of), seed=0)
    if not a.compiled:
        kw["enforce_eager"] = True
    rows = []
    command = " ".join(["python", *sys.argv])

    def record(phase, engine, setting, b, secs, ttft, kv, llm=None):
        compiled = None if llm is None else not llm.llm_engine.vllm_config.model_config.enforce_eager
        rows.append({"phase": phase, "engine": engine, "setting": setting, "batch": b, "new": new_of[b],
                     "tokens_per_s": b * new_of[b] / secs, "ttft_s": ttft, "kv_bytes_per_token": kv,
                     "cpu_s": _CPU.pop() if engine == "vllm" and _CPU else None,
                     "compiled": compiled, "load_1min": round(os.getloadavg()[0], 2)})
        print(json.dumps(rows[-1]), flush=True)
        if a.out:  # the rows so far, so that an interrupted run keeps them
            from geosteer.io_utils import atomic_write_text

            atomic_write_text(a.out, json.dumps({"command": command, "rows": rows}, indent=1) + "\n")

    # KV space per engine: the surfaces layers hold 1 + K channels per KV head
    kv_tokens = max(b * (a.prompt_tokens + new_of[b] + 16) for b in batches)
    steered_gib = max(1, math.ceil(kv_tokens * 600_000 / 2**30))
    hf_inter = spec_of(recipes["surfaces"])[0].build(model) if hf_batches else []
    others = {k: v for k, v in recipes.items() if k not in ("surfaces", "vector_all")}
    phases = [1, 2] if others else [1]
    stock_kw = {**kw, "enforce_eager": not (a.stock_compiled or a.compiled)}
    for phase in phases:
        stock = [] if a.no_stock_engine else [(_engine(a.model, None, 1, stock_kw), {"stock": None})]
        if phase == 1:  # (engine, {setting: recipe}) in turn; one steered engine (the recipe tables are per process)
            first = {k: recipes[k] for k in ("surfaces", "vector_all") if k in recipes}
            runs = ({"stock_on_steered": None} if a.steered_stock else {}) | {k: k for k in first}
            runs |= {"inline_mixed": inline} if policy else {}
            engines = [(_engine(a.model, first, steered_gib, kw, inline=policy), runs)]
            if a.with_channels:
                engines.append((_engine(a.model, {"surfaces": recipes["surfaces"]}, steered_gib, kw, True),
                                {"surfaces_channels": "surfaces"}))
        else:
            engines = [(_engine(a.model, others, 1, kw), {name: name for name in others})]
        engines = stock + engines
        for llm, runs in engines:  # warm-up, with every recipe of the engine
            every = [r for v in runs.values() for r in (v if isinstance(v, list) else [v])]
            _vllm_run(llm[0], prompts[batches[0]] * len(every), 4, every)
        _hook(a.before_rounds)
        try:
            for _ in range(a.repeats):
                for b in sorted({*batches, *(hf_batches if phase == 1 else [])}):
                    if b in batches:
                        for llm, runs in engines:
                            for name, recipe in runs.items():
                                record(phase, "vllm", name, b, *_vllm_run(llm[0], prompts[b], new_of[b], recipe),
                                       llm[1], llm[0])
                    if phase == 1 and b in hf_batches:
                        record(phase, "hf", "surfaces", b, *_hf_run(model, prompts[b], new_of[b], hf_inter), None)
        finally:
            _hook(a.after_rounds)
        del stock, engines, llm  # no other reference: the engines shut down here, before the next phase
        gc.collect()
    out = {"command": command, "model": a.model, "surfaces": a.surfaces, "rows": rows, "ratios": _ratios(rows),
           "flop_floor": _floors(model, recipes["surfaces"], a.prompt_tokens, new_of, batches),
           "load_average": os.getloadavg()}
    print(json.dumps(out["ratios"], indent=1))
    if a.out:
        from geosteer.io_utils import atomic_write_text

        atomic_write_text(a.out, json.dumps(out, indent=1) + "\n")
    return out


def _ratios(rows: list[dict]) -> dict:
    """Per batch: each vLLM recipe's time over the vLLM stock run of its phase (and over the steered engine's
    stock requests, where timed), and vLLM surfaces' tokens/s over the HF path's."""
    runs: dict = {}
    cpu: dict = {}
    for r in rows:
        runs.setdefault((r["phase"], r["engine"], r["setting"], r["batch"]), []).append(r["tokens_per_s"])
        if r.get("cpu_s"):
            cpu.setdefault((r["phase"], r["setting"], r["batch"]), []).append(r["cpu_s"])
    by = {k: statistics.median(v) for k, v in runs.items()}
    cpu_by = {k: statistics.median(v) for k, v in cpu.items()}
    out: dict = {}
    for (phase, engine, setting, b), tps in by.items():
        for base, label in (("stock", "vllm_stock"), ("stock_on_steered", "stock_on_steered")):
            stock = by.get((phase, "vllm", base, b))
            if engine != "vllm" or setting in (base, "stock") or not stock:
                continue
            out[f"{setting}_time_vs_{label}@{b}"] = round(stock / tps, 3)
            if (phase, setting, b) in cpu_by and (phase, base, b) in cpu_by:
                out[f"{setting}_cpu_time_vs_{label}@{b}"] = round(cpu_by[(phase, setting, b)]
                                                                 / cpu_by[(phase, base, b)], 3)
        if engine == "hf":
            v = by.get((phase, "vllm", "surfaces", b))
            if v:
                out[f"vllm_surfaces_vs_hf_tokens_per_s@{b}"] = round(v / tps, 3)
    return out


if __name__ == "__main__":
    main()
