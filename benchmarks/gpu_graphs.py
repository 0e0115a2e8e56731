"""Decoding under CUDA graphs, stock vs surfaces: the ``graphs`` part of ``benchmarks/gpu_smoke.py --scale``.

A static KV cache (transformers' ``StaticCache``, ``cache``-token prompt + ``new`` tokens) is prefilled once
(stock); each side then decodes ``new`` greedy tokens through ``torch.compile(model, mode="reduce-overhead",
fullgraph=True, dynamic=False)`` (inductor + CUDA graphs), the cache rewound to the prompt before every run
so both sides decode from the same cache. The surfaces take the PyTorch path inside the graph with the
preallocated decode feature cache (``geosteer.kernels.feature_cache.StaticFeatureCache``); one eager step
on that path fills it before each surfaces run (the first allocates it, outside the graph, so its address
is static; the stock runs in between wrote KV rows without it). Fails fast when the graphed
logits of the first step differ from the eager ones beyond bf16 rounding. The CPU dry run traces the
surfaces' step with Dynamo alone (``backend="eager"``) and runs the stock one eagerly: the plumbing, not the
times.
"""

from __future__ import annotations

import time

import torch


def feature_cache_gib(model, bank, batch: int, length: int) -> float:
    """Size of the decode feature cache (fp32, every surface layer) for ``batch`` x ``length`` rows."""
    cfg = model.config
    kv_heads = cfg.num_key_value_heads
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return len(bank.layers) * batch * kv_heads * length * d * (bank.K + 1) * 4 / 2**30


def _rewind(cache, n: int) -> None:
    for layer in cache.layers:
        layer.cumulative_length.fill_(n)  # in place: the graphs hold its address


def graphed_decode(model, bank, dev, B: int, plan: dict, vocab: int, repeats: int, timed) -> dict:
    """Tokens/s of greedy decoding under CUDA graphs at batch ``B``, stock vs surfaces (see the module
    docstring; ``timed``: gpu_scale's interleaved timer); raises AssertionError when the graphed step's logits
    are not the eager step's."""
    from transformers import StaticCache

    n0, new = plan["cache"], plan["new"]
    need = feature_cache_gib(model, bank, B, n0 + new)
    if dev.type == "cuda":
        free = torch.cuda.mem_get_info(dev)[0] / 2**30
        if need > 0.6 * free:
            return {"skipped": f"memory: the feature cache needs {need:.1f} GiB, {free:.1f} GiB free"}
    cache = StaticCache(config=model.config, max_cache_len=n0 + new)
    ids = torch.randint(10, vocab, (B, n0), device=dev)
    bank.backend = "torch"  # the path a graph holds (also outside it, for the reference step)
    with torch.no_grad():
        bank.enabled = False
        first = model(ids, cache=cache, use_cache=True, logits_to_keep=1).logits[:, -1].argmax(-1, keepdim=True)
        bank.enabled = True
        eager = model(first, cache=cache, use_cache=True).logits[:, -1].float()  # allocates the feature cache
    _rewind(cache, n0)
    cfg = torch._dynamo.config  # two sides x batches x shapes graphs of one forward
    cfg.recompile_limit = max(cfg.recompile_limit, 32)
    if dev.type == "cuda":
        step = torch.compile(model, mode="reduce-overhead", fullgraph=True, dynamic=False)
    else:
        step = torch.compile(model, backend="eager", fullgraph=True, dynamic=False)
    t0 = time.perf_counter()
    with torch.no_grad():
        graphed = step(input_ids=first, cache=cache, use_cache=True).logits[:, -1].float()
    rec = {"compile_s": round(time.perf_counter() - t0, 1), "feature_cache_gib": round(need, 2),
           "first_step_max_abs": float((graphed - eager).abs().max())}
    tol = 2 ** -7 * max(1.0, float(eager.abs().max()))
    if not rec["first_step_max_abs"] <= tol:
        raise AssertionError(f"graphed decode step vs eager: max |Δlogit| {rec['first_step_max_abs']} > {tol}")

    # the CPU dry run traces the surfaces side only (the stock trace adds time, not coverage)
    stock_step = step if dev.type == "cuda" else model

    def run():
        _rewind(cache, n0)
        tok = first
        fn = step if bank.enabled else stock_step
        with torch.no_grad():
            for _ in range(new):
                tok = fn(input_ids=tok, cache=cache, use_cache=True).logits[:, -1].argmax(-1, keepdim=True)

    def stock():
        bank.enabled = False

    def surfaces():  # the stock runs wrote the KV cache without the feature cache: one eager step refills it
        bank.enabled = True
        _rewind(cache, n0)
        with torch.no_grad():
            model(first, cache=cache, use_cache=True)

    try:
        rec |= timed({"stock": stock, "surfaces": surfaces}, run, dev, repeats, ["stock", "surfaces"])
        rec["feature_cache_live"] = all(c.live for c in bank._static_caches.values())  # the graphs used it
    finally:
        bank.enabled, bank.backend = True, None
        bank.clear_cache()
    for n in ("stock", "surfaces"):
        rec[f"{n}_tok_s"] = round(B * new / rec[f"{n}_s"], 1)
    return rec
