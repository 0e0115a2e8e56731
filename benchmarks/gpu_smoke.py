"""GPU smoke test of geosteer on any model: load, neutral check, surfaces forward / decode / train step, ratios.

``--scale``: the prepared scale run instead (Llama-3.2-1B- and Llama-3-8B-shaped random-weight models,
Triton vs PyTorch surfaces vs stock at 512–32k tokens, decode, training, memory, rank-2 surfaces on the
narrow Triton kernel; ``benchmarks/gpu_scale.py``):

    python benchmarks/gpu_smoke.py --scale --out gpu_scale.json     # one GPU, about 5 minutes
    python benchmarks/gpu_smoke.py --scale --dry-run                # CPU, tiny shape, Triton interpreter

Meant for a first run on a GPU machine (``--device cuda --dtype bf16``, optionally ``--device-map auto``);
it runs anywhere torch runs, so ``--device cpu`` is the dry run:

    .venv/bin/python benchmarks/gpu_smoke.py --model tiny-llama --device cpu --dtype float32 \\
        --seq-len 64 --batch 2 --new-tokens 8 --repeats 2
    python benchmarks/gpu_smoke.py --model /path/to/SmolLM2-135M-Instruct --device cuda --dtype bf16

Checks (any failure exits 1 after printing the record):

- neutral: zero surfaces attached give exactly the logits of the model without them (bitwise);
- stock:   geosteer's registered attention function vs transformers' own SDPA (max |Δlogit|, must be within
           the dtype's rounding: bf16 0.05, fp16 0.02, fp32 1e-4, scaled by the logit range);
- effect:  random non-zero surfaces change the logits, and nothing is non-finite;
- decode:  cached greedy decoding with surfaces gives the tokens of an uncached greedy loop (first
           --check-tokens tokens; bf16 ties aside, see the record's ``decode_agree``).

Timings (median of --repeats after one warm-up, interleaved stock / surfaces; the device is synchronised
around each): forward at --batch x --seq-len, greedy decode of --new-tokens tokens, one training step
(forward + backward + Adam on the coefficients) vs a stock forward + backward through the inputs. Prints one
JSON record (also to --out).
"""

from __future__ import annotations

import os
import sys

if "--scale" in sys.argv and "--dry-run" in sys.argv:  # before anything imports triton
    os.environ.setdefault("TRITON_INTERPRET", "1")

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from geosteer import load_model, manifold
from geosteer.io_utils import atomic_write_text
from geosteer.models.loading import input_device


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn, device, repeats: int) -> list[float]:
    fn()  # warm-up (kernels, caches, allocator)
    _sync(device)
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        out.append(time.perf_counter() - t0)
    return out


def _pair(stock_fn, surf_fn, bank, device, repeats: int) -> dict:
    """Interleaved timings: stock (bank disabled) and surfaces, median seconds and ratio."""
    s_times, m_times = [], []
    for _ in range(repeats):
        bank.enabled = False
        s_times += _timed(stock_fn, device, 1)
        bank.enabled = True
        m_times += _timed(surf_fn, device, 1)
    s, m = statistics.median(s_times), statistics.median(m_times)
    return {"stock_s": round(s, 5), "surfaces_s": round(m, 5), "ratio": round(m / s, 3)}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if "--scale" in args:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import gpu_scale

        return gpu_scale.main([x for x in args if x != "--scale"])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--device-map", default=None, help="e.g. auto (then --device is ignored)")
    ap.add_argument("--surfaces", default=None, help="artifact folder or Hub id; default random surfaces")
    ap.add_argument("--grid", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--check-tokens", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)

    rec: dict = {"argv": sys.argv[1:] if argv is None else argv, "torch": torch.__version__,
                 "python": platform.python_version(), "checks": {}}
    t0 = time.perf_counter()
    model, tok = load_model(a.model, dtype=a.dtype, device=a.device, device_map=a.device_map)
    dev = input_device(model)
    _sync(dev)
    rec["load_s"] = round(time.perf_counter() - t0, 2)
    rec["device"] = torch.cuda.get_device_name(dev) if dev.type == "cuda" else str(dev)
    rec["dtype"] = str(next(p for p in model.parameters()).dtype)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    g = torch.Generator().manual_seed(a.seed)
    vocab = model.config.vocab_size
    ids = torch.randint(10, vocab, (a.batch, a.seq_len), generator=g).to(dev)
    ok = True

    with torch.no_grad():
        # stock: transformers' own SDPA vs geosteer's attention function (both without interventions)
        ref_attn = model.config._attn_implementation
        model.set_attn_implementation("sdpa")
        sdpa = model(ids).logits.float()
        model.set_attn_implementation(ref_attn)
        plain = model(ids).logits.float()
        d = float((sdpa - plain).abs().max())
        tol = {"torch.bfloat16": 0.05, "torch.float16": 0.02}.get(rec["dtype"], 1e-4) * max(
            1.0, float(plain.abs().max()) / 10)
        rec["checks"]["stock_vs_sdpa_max_abs"] = d
        ok &= d <= tol
        # neutral: zero surfaces
        bank = manifold.install(model, grid_size=a.grid)
        zero = model(ids).logits.float()
        rec["checks"]["neutral_bitwise"] = bool(torch.equal(zero, plain))
        ok &= rec["checks"]["neutral_bitwise"]
        manifold.uninstall(model)
        if a.surfaces:
            bank = manifold.load(a.surfaces, model=model)
        else:
            with torch.no_grad():
                bank.coefficients.copy_(torch.randn(bank.coefficients.shape, generator=g).to(
                    bank.coefficients.device) * 0.1)
        manifold.install(model, bank=bank)
        surf = model(ids).logits.float()
        rec["checks"]["surfaces_finite"] = bool(torch.isfinite(surf).all())
        rec["checks"]["surfaces_effect_max_abs"] = float((surf - plain).abs().max())
        ok &= rec["checks"]["surfaces_finite"] and rec["checks"]["surfaces_effect_max_abs"] > 0

        # decode: cached greedy (generate) vs an uncached greedy loop, with surfaces
        prompt = ids[:1, : min(a.seq_len, 32)]
        n = a.check_tokens
        cached = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n, do_sample=False,
                                min_new_tokens=n, pad_token_id=tok.pad_token_id)[0, prompt.shape[1]:]
        cur = prompt
        for _ in range(n):
            nxt = model(cur, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
            cur = torch.cat([cur, nxt], dim=1)
        loop = cur[0, prompt.shape[1]:]
        agree = int((cached == loop).cumprod(0).sum())
        rec["checks"]["decode_agree"] = f"{agree}/{n}"
        ok &= agree == n or rec["dtype"] != "torch.float32"  # bf16/fp16: a near-tie may flip a token

        timings: dict = {}
        timings["forward"] = _pair(lambda: model(ids), lambda: model(ids), bank, dev, a.repeats)
        gen_kw = dict(attention_mask=torch.ones_like(prompt), max_new_tokens=a.new_tokens,
                      min_new_tokens=a.new_tokens, do_sample=False, pad_token_id=tok.pad_token_id)
        timings["decode"] = _pair(lambda: model.generate(prompt, **gen_kw), lambda: model.generate(prompt, **gen_kw),
                                  bank, dev, a.repeats)
        timings["decode"]["tokens"] = a.new_tokens

    # training step: surfaces (coefficients only) vs stock forward + backward through the input embeddings
    emb = model.get_input_embeddings()
    labels = ids.clone()
    bank.coefficients.requires_grad_(True)
    opt = torch.optim.Adam([bank.coefficients], lr=1e-3)

    def step_surfaces():
        opt.zero_grad(set_to_none=True)
        loss = model(ids, labels=labels).loss
        loss.backward()
        opt.step()

    def step_stock():
        x = emb(ids).detach().requires_grad_(True)
        loss = model(inputs_embeds=x, labels=labels).loss
        loss.backward()

    timings["train_step"] = _pair(step_stock, step_surfaces, bank, dev, a.repeats)
    rec["checks"]["train_grad_finite"] = bool(torch.isfinite(bank.coefficients.grad).all())
    ok &= rec["checks"]["train_grad_finite"]
    manifold.uninstall(model)
    rec["timings"] = timings
    rec["shape"] = {"batch": a.batch, "seq_len": a.seq_len, "grid": a.grid, "layers": len(bank.layers)}
    if dev.type == "cuda":
        rec["peak_gpu_gib"] = round(torch.cuda.max_memory_allocated(dev) / 2**30, 2)
    rec["ok"] = bool(ok)
    text = json.dumps(rec, indent=1)
    print(text)
    if a.out is not None:
        atomic_write_text(a.out, text + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
