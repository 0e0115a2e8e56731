"""The r + 1-slice attention of rank-r surfaces C_d = U_d W_dᵀ (U, W: (H, d, K, r)).

    o_id = (A V)_id + Σ_s (B(q_id)·u_ds) (A F_s)_id,   F_s[j, d] = v_jd · (B(k_jd)·w_ds)

:func:`narrow_key_features` builds r + 1 planes per query head from the 4 non-zero bases; weights are those
of :func:`geosteer.kernels.exact.modulated_attention`. On the CPU in float32 the key side, the epilogue and
(unmasked, ≥ 16 queries) a flash-style attention are compiled; ``compiled=False`` gives PyTorch ops.
"""

from __future__ import annotations

import torch

from geosteer.kernels.bspline import bspline_local
from geosteer.kernels.exact import ext_for, grid_affine
from geosteer.kernels.sdpa import prepare, query_blocks, weights_block

_HALF = (torch.float16, torch.bfloat16)
FLASH_BLOCKS = (128, 256)  # queries, keys per tile of the compiled flash kernel
FLASH_MIN_QUERIES = 16  # fewer queries (decoding): one batched product per query block is faster


def _rank_ext(x: torch.Tensor, lo, hi, compiled: bool):
    """The compiled module when it applies here and has the rank-r kernels (an older build has not)."""
    ext = ext_for(x, lo, hi) if compiled else None
    return ext if ext is not None and hasattr(ext, "low_rank_epilogue") else None


def flash(ext, query, key, features, common: dict, blocks: tuple[int, int], *params) -> torch.Tensor | None:
    """softmax(scores)·features (b, H, L, W) by the compiled flash-style kernel (``csrc/feature_flash.cpp``: no
    attention matrix in memory); None where it does not apply: a mask, dropout, fewer than
    ``FLASH_MIN_QUERIES`` queries, autograd through any input or ``params``, an older build."""
    if ext is None or not hasattr(ext, "feature_flash") or common["attn_mask"] is not None or common["dropout"]:
        return None
    if common["L"] < FLASH_MIN_QUERIES or (torch.is_grad_enabled() and any(
            t.requires_grad for t in (query, key, features, *params))):
        return None
    b, hf, T = features.shape[:3]
    return ext.feature_flash(query, key, features.reshape(b, hf, T, -1), common["scaling"], common["softcap"] or 0.0,
                             common["causal"], blocks[0], blocks[1])


def projected(x: torch.Tensor, F: torch.Tensor, grid_size: int, lo, hi) -> torch.Tensor:
    """B(x_d)·F[g, r, d, :, s] for x (b, hkv, rep|1, n, d) and F (hkv, rep, d, K, r): (b, hkv, rep, n, d, r).

    Uses the 4 non-zero bases: rows a0 … a0+3 of F (zero-padded by 3 on both sides) looked up per entry."""
    hkv, rep, d, K, r = F.shape
    a0, w = bspline_local(x, grid_size, lo, hi)  # (b, hkv, rep|1, n, d), (…, 4)
    table = torch.nn.functional.pad(F.to(x.dtype), (0, 0, 3, 3)).reshape(-1, r)  # rows (g, r', d, K+6)
    g = torch.arange(hkv, device=x.device).view(1, hkv, 1, 1, 1)
    rr = torch.arange(rep, device=x.device).view(1, 1, rep, 1, 1)
    dd = torch.arange(d, device=x.device).view(1, 1, 1, 1, d)
    base = ((g * rep + rr) * d + dd) * (K + 6) + 3  # (1, hkv, rep, 1, d)
    idx = (base + a0).unsqueeze(-1) + torch.arange(4, device=x.device)  # (b, hkv, rep, n, d, 4)
    rows = torch.nn.functional.embedding(idx, table)  # (b, hkv, rep, n, d, 4, r)
    out = rows[..., 0, :] * w[..., 0, None]
    for j in range(1, 4):
        out += rows[..., j, :] * w[..., j, None]
    return out


def narrow_key_features(key: torch.Tensor, value: torch.Tensor, W: torch.Tensor, grid_size: int, lo, hi, *,
                        compiled: bool = True) -> torch.Tensor:
    """Rank-r key-side features (b, H, T, (r+1)·d), planar, of keys/values (b, Hkv, T, d) for W (H, d, K, r).

    bf16/fp16 inputs are computed in fp32; ``compiled=False``: PyTorch ops only."""
    if key.dtype in _HALF:
        key, value = key.float(), value.float()
    W = W.to(key.dtype)
    ext = _rank_ext(key, lo, hi, compiled)
    if ext is not None:
        sc, off = grid_affine(grid_size, lo, hi)
        return ext.low_rank_key_features(key, value, W, grid_size, sc, off)
    b, hkv, T, d = key.shape
    H, r = W.shape[0], W.shape[-1]
    rep = H // hkv
    gk = projected(key[:, :, None], W.view(hkv, rep, d, -1, r), grid_size, lo, hi)  # (b, hkv, rep, T, d, r)
    v6 = value[:, :, None, :, None, :]
    feats = torch.cat((gk.transpose(-1, -2) * v6, v6.expand(-1, -1, rep, -1, 1, -1)), -2)
    return feats.reshape(b, H, T, (r + 1) * d)


def _epilogue(ext, o, query, U, grid_size, lo, hi, with_value) -> torch.Tensor:
    """(b, n, H, d) from attended features o (b, H, n, (r+1)·d) and queries (b, H, n, d)."""
    if ext is not None:
        sc, off = grid_affine(grid_size, lo, hi)
        return ext.low_rank_epilogue(o, query, U, grid_size, sc, off, with_value)
    b, H, n, d = query.shape
    r = U.shape[-1]
    o = o.view(b, H, n, r + 1, d)
    qf = projected(query[:, None], U.view(1, H, d, -1, r), grid_size, lo, hi).view(b, H, n, d, r)
    delta = (o[..., :r, :] * qf.transpose(-1, -2)).sum(-2)
    out = o[..., r, :] + delta if with_value else delta
    return out.transpose(1, 2)


def low_rank_attention(query, key, value, U, W, grid_size: int, lo, hi, *, attn_mask=None, is_causal=False,
                       scaling=None, softcap=None, with_value: bool = True, block: int = 128,
                       features: torch.Tensor | None = None, compiled: bool = True) -> torch.Tensor:
    """Modulated attention (b, L, H, d) with rank-r surfaces C = U Wᵀ (U, W: (H, d, K, r)), r + 1 slices.

    Same masks, scaling, soft-capping and GQA as :func:`geosteer.kernels.exact.modulated_attention`.
    ``features``: precomputed :func:`narrow_key_features` of these keys (decode cache). ``with_value=False``
    returns only Δo. bf16/fp16 run in fp32 and come back in the input dtype.
    """
    dtype = query.dtype
    if dtype in _HALF:
        query, key, value = query.float(), key.float(), value.float()
        attn_mask = attn_mask if attn_mask is None or attn_mask.dtype == torch.bool else attn_mask.float()
        features = None if features is None else features.float()
    key, value, features, query_g, common = prepare(query, key, value, attn_mask=attn_mask, is_causal=is_causal,
                                                    scaling=scaling, softcap=softcap, dropout=0.0,
                                                    features=features)
    if features is None:
        features = narrow_key_features(key, value, W, grid_size, lo, hi, compiled=compiled)
    b, H, L, d = query.shape
    U = U.to(query.dtype)
    ext = _rank_ext(query, lo, hi, compiled)
    o = flash(ext, query, key, features, common, FLASH_BLOCKS, U)
    if o is not None:
        return _epilogue(ext, o, query, U, grid_size, lo, hi, with_value).contiguous().to(dtype)
    outs = []
    for s0, e0, rng in query_blocks(L, block, common):
        if rng is None:
            outs.append(query.new_zeros(b, e0 - s0, H, d))
            continue
        k0, k1 = rng
        p = weights_block(query_g, key, s0, e0, k0, k1, **common)  # (b, hkv, rep, n_q, n_k)
        # one bmm over the (b, H) products: one parallel region per block (a GEMM per head made the 2-thread
        # forward 1.8x slower on a loaded machine)
        o = torch.matmul(p.view(b, H, e0 - s0, k1 - k0), features[:, :, k0:k1])  # (b, H, n_q, (r+1)·d)
        outs.append(_epilogue(ext, o, query[:, :, s0:e0], U, grid_size, lo, hi, with_value))
    out = torch.cat(outs, dim=1) if len(outs) > 1 else outs[0]
    return out.contiguous().to(dtype)


def cached_features(cache, query, key, value, W, grid_size: int, lo, hi, version, *, compiled: bool = True,
                    attn_mask=None, is_causal=False, **_) -> torch.Tensor | None:
    """Decoding with a KV cache (fewer queries than keys, no autograd): :func:`narrow_key_features` of all keys
    with the past keys' rows reused from ``cache`` (a ``FeatureCache``; ``version`` identifies the factors).
    None otherwise (the kernel computes them): prompts, and the purely causal call that crops its keys."""
    L, T = query.shape[2], key.shape[2]
    if torch.is_grad_enabled() or L >= T or (is_causal and attn_mask is None and L > 1):
        return None
    return cache.get(key, value, L, (lo, hi, version),
                     lambda kk, vv: narrow_key_features(kk, vv, W, grid_size, lo, hi, compiled=compiled))
