"""The attention handler of a ``SurfaceBank``: one call of a covered layer through the surface kernels.

The stock part joins the same product only when this handler is last in the chain. Decoding reuses key
features (``FeatureCache`` beside a dynamic KV cache, ``StaticFeatureCache`` beside a static one; Triton
builds them on chip). Under ``torch.compile`` it keeps to what a graph holds (PyTorch kernels, tensor grid
ranges, additive masks, static feature cache), so ``fullgraph=True`` traces without breaks.
"""

from __future__ import annotations

import torch

from geosteer.attention import attention_handlers
from geosteer.errors import GeosteerError
from geosteer.kernels.exact import backend_choice, key_features, modulated_attention, use_triton
from geosteer.kernels.feature_cache import FeatureCache, StaticFeatureCache, is_static_kv, static_kv_layer


def surface_attention(bank, call, proceed, slot: int, handler):
    """The surface handler's output (b, q, heads, d) for one call of the layer in ``slot`` (a ``SurfaceBank``),
    and the weights of the stock path when it ran (else None)."""
    coeff = bank.coefficients
    grad = torch.is_grad_enabled() and coeff.requires_grad
    tracing = torch.compiler.is_compiling()
    if not bank.enabled or (not grad and not tracing and not bank.layer_nonzero(slot)):
        _forget_static(bank, slot)
        return proceed(call)  # zero surfaces: exactly the stock path
    kw = call.kwargs
    if kw.get("position_bias") is not None:
        raise GeosteerError("attention surfaces do not support position_bias attention")
    q, k, v = call.query, call.key, call.value
    if call.n_rep * k.shape[1] != q.shape[1]:
        raise GeosteerError(f"query heads {q.shape[1]} are not a multiple of KV heads {k.shape[1]}")
    L, T = q.shape[2], k.shape[2]
    is_causal = kw.get("is_causal")
    if is_causal is None:
        is_causal = getattr(call.module, "is_causal", True)
    lo, hi = bank.lo[slot], bank.hi[slot]
    lo_f, hi_f = (lo, hi) if tracing else (float(lo), float(hi))
    c = bank._layer_coeff(slot, grad)
    if c.device != q.device:  # layers split over devices (device_map): this layer's device
        c = c.to(q.device)
    # We compute the stock part ourselves only when we are the last handler in the chain, so that
    # handlers attached after us (recorders, value edits) still see and change the call.
    last = attention_handlers(call.module)[-1] is handler
    fused = bank.fused and last
    features = None
    name = "torch" if tracing else backend_choice(bank.backend)
    low_rank = (bank.rank is not None and not grad and not tracing and not (call.dropout and call.module.training))
    if not torch.is_grad_enabled() and L < T and not low_rank and not use_triton(name, q, lo_f, hi_f):
        features = _cached_features(bank, call, slot, L, lo_f, hi_f, bool(is_causal), tracing)
    else:
        _forget_static(bank, slot)
    attend = bank._low_rank_attention(slot, c) if low_rank else modulated_attention
    mask = call.attention_mask
    if tracing and mask is not None and mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=q.dtype, device=mask.device).masked_fill(~mask, torch.finfo(q.dtype).min)
    out = attend(
        q, k, v, c, bank.grid_size, lo_f, hi_f, attn_mask=mask, is_causal=bool(is_causal),
        scaling=call.scaling, softcap=kw.get("softcap"),
        dropout=call.dropout if call.module.training else 0.0,
        features=features, with_value=fused, block=bank.block, backend=name)
    if fused:
        return out, None
    base, w = proceed(call)
    return base + out.to(base.dtype), w


def _cached_features(bank, call, slot: int, L: int, lo, hi, is_causal: bool, tracing: bool):
    """Decoding with a KV cache: the key-side features of all keys, the past keys' reused (None: compute
    them in the kernel). A static KV cache layer gets the preallocated ``StaticFeatureCache`` (also while
    tracing); a dynamic one the growing ``FeatureCache`` (not while tracing); a sliding static one none."""
    k, v = call.key, call.value

    def compute(kk, vv):
        return key_features(kk, vv, bank.grid_size, lo, hi, compiled=not tracing)

    kv_layer = bank._kv_layers.get(slot)
    static = static_kv_layer(kv_layer, k, v)
    if static is not None:
        cache = bank._static_caches.get(slot)
        if cache is None:
            cache = bank._static_caches[slot] = StaticFeatureCache()
        return cache.get(static, k, v, L, (lo, hi) if not tracing else None, compute, tracing)
    _forget_static(bank, slot)
    crop = is_causal and call.attention_mask is None and L > 1 and k.shape[2] > L
    if tracing or crop or is_static_kv(kv_layer):
        return None
    cache = bank._caches.setdefault(slot, FeatureCache())
    return cache.get(k, v, L, (lo, hi), compute)


def _forget_static(bank, slot: int) -> None:
    """This call writes the KV cache without the static feature cache (if there is one)."""
    cache = bank._static_caches.get(slot)
    if cache is not None:
        cache.forget()
