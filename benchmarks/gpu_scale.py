"""Surfaces at scale on one GPU: Llama-3.2-1B- and Llama-3-8B-shaped models (random weights, bf16).

Run through ``benchmarks/gpu_smoke.py --scale`` (or directly). Built from the configs (no Hub); every layer
carries random non-zero surfaces (grid 8). In this order, failing fast (exit 1, record written):

1. exactness: the compiled Triton kernel vs the PyTorch path on layer-shaped tensors (fp32: causal,
   padding, split-K decode; bf16 inputs), then whole-model logits Triton vs PyTorch path (bf16, padded batch);
2. forward (no cache, batch 1, logits of the last position) at 512, 2k, 8k, 32k tokens: stock SDPA (flash)
   vs surfaces on the Triton backend vs surfaces on the PyTorch path (the PyTorch path up to ``torch_max``);
3. cached decoding, tokens/s at batch 1 and 32 after a 4k-token prompt (the same cache for every side);
4. one training step at 2k tokens (surfaces: coefficients trainable + Adam; stock: backward through the
   input embeddings), with peak memory per side;
5. decoding under CUDA graphs (``gpu_graphs.py``): a 4k static cache, ``torch.compile(mode="reduce-overhead",
   fullgraph=True)``, stock vs surfaces, both graphed, tokens/s at batch 1 and 32;
6. rank 2 (``gpu_low_rank.py``): the bank truncated to rank 2, forward at 512 and 2k tokens, stock vs the exact
   Triton kernel on the truncated coefficients vs the narrow rank-2 Triton kernel (its exactness against the
   PyTorch path of the same rank-2 math is checked with the others in step 1, and on whole-model logits).

``--parts`` picks among forward, decode, train, graphs, rank2 (the exactness checks always run):

    python benchmarks/gpu_smoke.py --scale --shapes 1b --parts graphs --out gpu_graphs.json

Timings: interleaved sides (stock, triton, torch, stock, ...) after one warm-up round, median of
``--repeats``, device synchronised. Anything past ``--budget-s`` is skipped and says so. One JSON record.

    python benchmarks/gpu_smoke.py --scale --out gpu_scale.json          # one H200: about 5 minutes
    python benchmarks/gpu_smoke.py --scale --dry-run                     # CPU, tiny, Triton interpreter
"""

from __future__ import annotations

import os
import sys

if "--dry-run" in sys.argv:  # the interpreter must be chosen before anything imports triton
    os.environ.setdefault("TRITON_INTERPRET", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_low_rank  # noqa: E402
from _common import check_close, logits_agreement, padded_batch  # noqa: E402

SHAPES = {
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
               num_key_value_heads=8, head_dim=64, vocab_size=128256, rope_theta=500000.0,
               max_position_embeddings=131072, tie_word_embeddings=True),
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=8, head_dim=128, vocab_size=128256, rope_theta=500000.0,
               max_position_embeddings=131072),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, vocab_size=512, max_position_embeddings=4096),
}
# per shape: forward lengths, PyTorch path up to, decode (batches, cache, new tokens), train length
PLANS = {
    "1b": dict(lengths=[512, 2048, 8192, 32768], torch_max=8192, batches=[1, 32], cache=4096, new=16, train=2048,
               rank2=[512, 2048]),
    "8b": dict(lengths=[512, 2048, 8192], torch_max=2048, batches=[1, 32], cache=4096, new=8, train=2048,
               rank2=[512, 2048]),
    "tiny": dict(lengths=[40], torch_max=40, batches=[2], cache=24, new=2, train=16, rank2=[16]),
}


PARTS = ("forward", "decode", "train", "graphs", "rank2")


class Budget(Exception):
    pass


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def build(shape: str, dev: torch.device, dtype: torch.dtype, seed: int):
    """A random-weight Llama of the given shape with the geosteer attention function and a random bank."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from geosteer import manifold
    from geosteer.attention import use_geosteer_attention

    torch.manual_seed(seed)
    cfg = LlamaConfig(**SHAPES[shape])
    with torch.device(dev):
        model = LlamaForCausalLM._from_config(cfg, dtype=dtype)
    model.eval().requires_grad_(False)
    use_geosteer_attention(model)
    bank = manifold.install(model, grid_size=8)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        bank.coefficients.copy_(torch.randn(bank.coefficients.shape, generator=g) * 0.05)
    return model, bank


def _sides(bank):
    """name -> set-up of that side (stock: surfaces off; triton / torch: the bank's backend)."""
    def side(enabled, backend):
        def prepare():
            bank.enabled, bank.backend = enabled, backend
        return prepare
    return {"stock": side(False, None), "triton": side(True, "triton"), "torch": side(True, "torch")}


WARMUP = 1  # rounds before the timed ones (0 in the dry run: it checks the plumbing, not the times)


def timed(sides: dict, fn, dev, repeats: int, names) -> dict:
    """Interleaved rounds over ``names`` after WARMUP rounds: median seconds and ratios to stock."""
    times = {n: [] for n in names}
    for r in range(repeats + WARMUP):
        for n in names:
            sides[n]()
            _sync(dev)
            t0 = time.perf_counter()
            fn()
            _sync(dev)
            if r >= WARMUP:
                times[n].append(time.perf_counter() - t0)
    med = {n: statistics.median(v) for n, v in times.items()}
    out = {f"{n}_s": round(m, 5) for n, m in med.items()}
    out.update({f"{n}_ratio": round(med[n] / med["stock"], 3) for n in names if n != "stock"})
    return out


def peak_gib(sides, fn, dev, names) -> dict:
    """Peak allocated memory above the model's, per side (GiB; CUDA only)."""
    if dev.type != "cuda":
        return {}
    out = {}
    for n in names:
        sides[n]()
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        fn()
        _sync(dev)
        out[f"{n}_peak_gib"] = round((torch.cuda.max_memory_allocated(dev) - base) / 2**30, 3)
    return out


def check_kernel(shape: str, dev, parts=()) -> dict:
    """Triton vs the PyTorch path on one layer's shapes (fp32 and bf16 inputs); raises on a mismatch."""
    from geosteer.kernels.exact import modulated_attention

    s = SHAPES[shape]
    H, hk, d = s["num_attention_heads"], s["num_key_value_heads"], s["head_dim"]
    g = torch.Generator(device=dev).manual_seed(0)
    res = {}
    gpu = dev.type == "cuda"  # the CPU dry run: the interpreter is slow, the same cases smaller
    for name, L, T, kw in (("causal", 301 if gpu else 19, 301 if gpu else 19, dict(is_causal=True)),
                           ("padding", 77 if gpu else 13, 77 if gpu else 13, "pad"),
                           ("decode_split", 1, 3000 if gpu else 40, {})):
        q = torch.randn(2, H, L, d, device=dev, generator=g) * 2
        k = torch.randn(2, hk, T, d, device=dev, generator=g) * 2
        v = torch.randn(2, hk, T, d, device=dev, generator=g)
        c = torch.randn(H, d, 11, 11, device=dev, generator=g) * 0.3
        if kw == "pad":
            m = torch.ones(2, 1, L, T, dtype=torch.bool, device=dev).tril()
            m[1, :, :, :9] = False
            kw = dict(attn_mask=m)
        for dt in (torch.float32, torch.bfloat16):
            x = [t.to(dt) for t in (q, k, v)]
            with torch.no_grad():
                a = modulated_attention(*x, c, 8, -4.0, 4.0, backend="triton", **kw).float()
                b = modulated_attention(*x, c, 8, -4.0, 4.0, backend="torch", **kw).float()
            res[f"{name}_{str(dt)[6:]}_max_abs"] = check_close(a, b, dt, f"triton vs torch path, {name} {dt}")
    if "rank2" in parts:
        res.update(gpu_low_rank.check_kernel(s, dev))
    return res


def check_model(model, bank, dev, vocab: int) -> dict:
    """Whole-model logits, Triton vs PyTorch path (bf16, a left-padded batch of 2 × 256; 2 × 24 on the CPU)."""
    ids, mask = padded_batch(dev, vocab)
    out = {}
    with torch.no_grad():
        logits = {}
        for n, prep in _sides(bank).items():
            prep()
            logits[n] = model(ids, attention_mask=mask).logits.float()
    keep = mask.bool()
    d, tol, agree = logits_agreement(logits["triton"], logits["torch"], keep)
    out.update(model_triton_vs_torch_max_abs=d, model_argmax_agree=agree,
               surfaces_effect_max_abs=float((logits["torch"] - logits["stock"])[keep].abs().max()))
    if not (d <= tol and agree >= 0.98 and out["surfaces_effect_max_abs"] > 0):
        raise AssertionError(f"model logits: triton vs torch max |Δ| {d} (tol {tol}), argmax agree {agree}")
    return out


def run_shape(shape: str, a, dev, dtype, t_start: float) -> dict:
    plan = PLANS[shape]
    rec: dict = {"shape": SHAPES[shape], "plan": plan}

    def budget():
        if time.perf_counter() - t_start > a.budget_s:
            raise Budget

    rec["kernel_checks"] = check_kernel(shape, dev, a.parts)
    model, bank = build(shape, dev, dtype, a.seed)
    sides = _sides(bank)
    vocab = SHAPES[shape]["vocab_size"]
    rec["model_checks"] = check_model(model, bank, dev, vocab)
    fw = rec["forward"] = {}
    for L in plan["lengths"] if "forward" in a.parts else []:
        try:
            budget()
        except Budget:
            fw[str(L)] = {"skipped": "budget"}
            continue
        ids = torch.randint(10, vocab, (1, L), device=dev)
        names = ["stock", "triton"] + (["torch"] if L <= plan["torch_max"] else [])

        def fwd(ids=ids, model=model):
            with torch.no_grad():
                model(ids, use_cache=False, logits_to_keep=1)
        fw[str(L)] = timed(sides, fwd, dev, a.repeats, names) | peak_gib(sides, fwd, dev, names)
        print(shape, "forward", L, fw[str(L)], flush=True)
    if "rank2" in a.parts:
        rec["rank2"] = gpu_low_rank.rank2_part(model, bank, dev, plan, vocab, a.repeats,
                                               lambda: time.perf_counter() - t_start > a.budget_s, timed)
    rec["decode"] = {}
    for B in plan["batches"] if "decode" in a.parts else []:
        try:
            budget()
            rec["decode"][f"batch{B}"] = decode(model, sides, dev, B, plan, vocab, a.repeats)
        except Budget:
            rec["decode"][f"batch{B}"] = {"skipped": "budget"}
        print(shape, "decode", B, rec["decode"][f"batch{B}"], flush=True)
    if "train" in a.parts:
        try:
            budget()
            rec["train_step"] = train_step(model, bank, sides, dev, plan["train"], vocab, a.repeats)
        except Budget:
            rec["train_step"] = {"skipped": "budget"}
        print(shape, "train", rec["train_step"], flush=True)
    if "graphs" in a.parts:
        rec["decode_graphs"] = graphs_part(model, bank, dev, plan, vocab, a.repeats, budget)
    bank.enabled, bank.backend = True, None
    del model, bank
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return rec


def decode(model, sides, dev, B: int, plan: dict, vocab: int, repeats: int) -> dict:
    """Greedy decoding of ``new`` tokens after a ``cache``-token prompt (prefilled once, stock; cropped back
    before every run so each side decodes from the same cache)."""
    n0, new = plan["cache"], plan["new"]
    ids = torch.randint(10, vocab, (B, n0), device=dev)
    sides["stock"]()
    with torch.no_grad():
        out = model(ids, use_cache=True, logits_to_keep=1)
    past, first = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)

    def run():
        extra = past.get_seq_length() - n0
        if extra > 0:
            past.crop(-extra)
        tok = first
        with torch.no_grad():
            for _ in range(new):
                tok = model(tok, past_key_values=past, use_cache=True).logits[:, -1].argmax(-1, keepdim=True)
    r = timed(sides, run, dev, repeats, ["stock", "triton", "torch"])
    for n in ("stock", "triton", "torch"):
        r[f"{n}_tok_s"] = round(B * new / r[f"{n}_s"], 1)
    return r


def graphs_part(model, bank, dev, plan: dict, vocab: int, repeats: int, budget) -> dict:
    """Decode under CUDA graphs at each batch of the plan (``gpu_graphs.graphed_decode``)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from gpu_graphs import graphed_decode

    out = {}
    for B in plan["batches"]:
        try:
            budget()
            out[f"batch{B}"] = graphed_decode(model, bank, dev, B, plan, vocab, repeats, timed)
        except Budget:
            out[f"batch{B}"] = {"skipped": "budget"}
        print("decode under graphs", B, out[f"batch{B}"], flush=True)
    return out


def train_step(model, bank, sides, dev, L: int, vocab: int, repeats: int) -> dict:
    ids = torch.randint(10, vocab, (1, L), device=dev)
    emb = model.get_input_embeddings()
    opt = torch.optim.Adam([bank.coefficients], lr=1e-4)

    def step():
        if not bank.enabled:  # stock: the backward runs through every layer (inputs require grad)
            x = emb(ids).detach().requires_grad_(True)
            model(inputs_embeds=x, labels=ids).loss.backward()
            return
        opt.zero_grad(set_to_none=True)
        model(ids, labels=ids).loss.backward()
        opt.step()

    bank.coefficients.requires_grad_(True)
    try:
        names = ["stock", "triton", "torch"]
        r = timed(sides, step, dev, repeats, names) | peak_gib(sides, step, dev, names)
        r["grad_finite"] = bool(torch.isfinite(bank.coefficients.grad).all())
    finally:
        bank.coefficients.requires_grad_(False)
        bank.coefficients.grad = None
    return r


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="1b,8b", help="comma list of 1b, 8b (tiny with --dry-run)")
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny shape, Triton interpreter: the plumbing")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=270.0, help="skip what would start after this many seconds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--parts", default=",".join(PARTS),
                    help=f"comma list of {', '.join(PARTS)} (the exactness checks always run)")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    from geosteer.io_utils import atomic_write_text

    a.parts = a.parts.split(",")
    bad = sorted(set(a.parts) - set(PARTS))
    if bad:
        print(f"error: --parts {','.join(bad)} is not a part; valid: {', '.join(PARTS)}", file=sys.stderr)
        return 2

    dev = torch.device("cpu" if a.dry_run else "cuda")
    dtype = torch.bfloat16
    shapes = ["tiny"] if a.dry_run else a.shapes.split(",")
    if a.dry_run:
        global WARMUP
        a.repeats, WARMUP = 1, 0
    rec: dict = {"argv": sys.argv[1:] if argv is None else argv, "torch": torch.__version__,
                 "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu (Triton interpreter)",
                 "dtype": str(dtype), "shapes": {}}
    t0 = time.perf_counter()
    ok = True
    for shape in shapes:
        try:
            rec["shapes"][shape] = run_shape(shape, a, dev, dtype, t0)
        except AssertionError as e:
            rec["shapes"][shape] = {"error": str(e)}
            ok = False
            break
    rec["wall_s"] = round(time.perf_counter() - t0, 1)
    rec["ok"] = ok
    text = json.dumps(rec, indent=1)
    print(text)
    if a.out is not None:
        atomic_write_text(a.out, text + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
