"""Rank-2 surfaces on the Triton backend: the ``rank2`` part of ``benchmarks/gpu_smoke.py --scale``.

The scale model's bank truncated to rank 2 (``bank.low_rank(2)``) runs three ways at the plan's ``rank2``
lengths (forward, no cache, batch 1): stock (surfaces off), the exact fused Triton kernel on the truncated
coefficients, and the narrow rank-2 Triton kernel (``geosteer.kernels.triton_low_rank``: r + 1 = 3 value
slices instead of K + 1 = 12). Fails fast (AssertionError) when the narrow kernel differs from the PyTorch
path of the same rank-2 math on layer-shaped tensors (``check_kernel``, with the scale script's exactness
checks) or in whole-model logits.
"""

from __future__ import annotations

import torch
from _common import check_close, logits_agreement, padded_batch  # benchmarks/ is on sys.path (gpu_scale)


def check_kernel(s: dict, dev) -> dict:
    """Narrow Triton vs the narrow PyTorch path on one layer's shapes (causal fp32, padding and decode bf16)."""
    from geosteer.kernels.low_rank import low_rank_attention
    from geosteer.kernels.triton_low_rank import low_rank_attention_triton
    from geosteer.manifold.low_rank import factors

    H, hk, d = s["num_attention_heads"], s["num_key_value_heads"], s["head_dim"]
    g = torch.Generator(device=dev).manual_seed(1)
    gpu = dev.type == "cuda"  # the CPU dry run: the interpreter is slow, the same cases smaller
    res = {}
    # one dtype per case: every dtype/mask variant is one more Triton compile on the GPU (tens of seconds each)
    for name, L, T, dt in (("causal", 301 if gpu else 19, 301 if gpu else 19, torch.float32),
                           ("padding", 77 if gpu else 13, 77 if gpu else 13, torch.bfloat16),
                           ("decode", 1, 3000 if gpu else 40, torch.bfloat16)):  # 3000 keys: split-K on CUDA
        q = torch.randn(2, H, L, d, device=dev, generator=g) * 2
        k = torch.randn(2, hk, T, d, device=dev, generator=g) * 2
        v = torch.randn(2, hk, T, d, device=dev, generator=g)
        U, W = factors(torch.randn(H, d, 11, 11, device=dev, generator=g) * 0.3, 2)
        kw = dict(is_causal=True) if name == "causal" else {}
        if name != "causal":
            m = torch.ones(2, 1, L, T, dtype=torch.bool, device=dev).tril(T - L)
            m[1, :, :, :9] = False
            kw = dict(attn_mask=m)
        x = [t.to(dt) for t in (q, k, v)]
        with torch.no_grad():
            a = low_rank_attention_triton(*x, U, W, 8, -4.0, 4.0, **kw).float()
            b = low_rank_attention(*x, U, W, 8, -4.0, 4.0, compiled=False, **kw).float()
        res[f"rank2_{name}_{str(dt)[6:]}_max_abs"] = check_close(a, b, dt, f"rank-2 triton vs torch path, {name} {dt}")
    return res


def _model_check(model, low, dev, vocab: int) -> dict:
    """Whole-model logits of the rank-2 bank, narrow Triton vs the narrow PyTorch path (bf16, padded 2 × n)."""
    ids, mask = padded_batch(dev, vocab)
    logits = {}
    with torch.no_grad():
        for backend in ("triton", "torch"):
            low.backend = backend
            logits[backend] = model(ids, attention_mask=mask).logits.float()
        low.enabled = False
        logits["stock"] = model(ids, attention_mask=mask).logits.float()
        low.enabled = True
    keep = mask.bool()
    d, tol, agree = logits_agreement(logits["triton"], logits["torch"], keep)
    effect = float((logits["torch"] - logits["stock"])[keep].abs().max())
    if not (d <= tol and agree >= 0.98 and effect > 0):
        raise AssertionError(f"rank-2 model logits: triton vs torch max |Δ| {d} (tol {tol}), argmax agree {agree}, "
                             f"effect of the surfaces {effect}")
    return {"rank2_triton_vs_torch_max_abs": d, "rank2_argmax_agree": agree, "rank2_effect_max_abs": effect}


def rank2_part(model, bank, dev, plan: dict, vocab: int, repeats: int, over_budget, timed) -> dict:
    """The rank-2 row (see the module docstring); ``timed``: gpu_scale's interleaved timer; a length is
    skipped once ``over_budget()``. The scale bank is reinstalled afterwards."""
    from geosteer import manifold

    low = bank.low_rank(2)
    e = torch.tensor(low.meta["low_rank"]["discarded_energy"], dtype=torch.float64)
    out: dict = {"discarded_energy_mean": float(e.mean()), "forward": {}}
    manifold.install(model, bank=low)
    try:
        out["model_checks"] = _model_check(model, low, dev, vocab)

        def side(enabled: bool, rank):
            def prepare():  # rank None: the exact kernels on the truncated coefficients (narrow=False)
                low.enabled, low.backend, low.rank = enabled, "triton", rank
            return prepare

        sides = {"stock": side(False, None), "exact": side(True, None), "rank2": side(True, 2)}
        for L in plan["rank2"]:
            if over_budget():
                out["forward"][str(L)] = {"skipped": "budget"}
                continue
            ids = torch.randint(10, vocab, (1, L), device=dev)

            def fwd(ids=ids):
                with torch.no_grad():
                    model(ids, use_cache=False, logits_to_keep=1)
            out["forward"][str(L)] = timed(sides, fwd, dev, repeats, list(sides))
            print("rank2 forward", L, out["forward"][str(L)], flush=True)
    finally:
        manifold.install(model, bank=bank)
    return out
