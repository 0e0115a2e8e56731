"""The stock attention weights of the surface kernels, block by block as SDPA makes them.

:func:`prepare` (scaling, empty-cache crop, mask crop, grouped queries), :func:`query_blocks` (the keys each
query block sees) and :func:`weights_block` (softmax weights with masks, soft-capping, dropout), shared by
the exact and rank-r kernels and the walls.
"""

from __future__ import annotations

import torch


def key_range(causal, attn_mask, float_mask, s, e, L, T):
    """The key interval [k0, k1) that queries [s, e) can see (None: nothing visible)."""
    if causal:
        return 0, min(T, e + (T - L))
    if attn_mask is not None and not float_mask:
        m = attn_mask[..., s:e, :]
        cols = m.reshape(-1, T).any(dim=0)
        nz = torch.nonzero(cols)
        if nz.numel() == 0:
            return None
        return int(nz[0]), int(nz[-1]) + 1
    return 0, T


_UPPER: dict = {}


def _upper(rows: int, cols: int, diagonal: int, device) -> torch.Tensor:
    """Cached boolean mask, True strictly above the given diagonal (torch.triu convention)."""
    key = (rows, cols, diagonal, str(device))
    m = _UPPER.get(key)
    if m is None:
        if len(_UPPER) > 256:
            _UPPER.clear()
        m = _UPPER[key] = torch.ones(rows, cols, dtype=torch.bool, device=device).triu(diagonal)
    return m


def weights_block(query_g, key, s, e, k0, k1, *, scaling, softcap, causal, attn_mask, float_mask, dropout,
                   L, T):
    """Attention weights (b, hkv, rep, n_q, n_k) of queries [s, e) over keys [k0, k1), as SDPA makes them.

    ``query_g`` is already multiplied by ``scaling`` when ``softcap`` is None (see the callers).
    """
    b, hkv, rep, _, d = query_g.shape
    n_q, n_k = e - s, k1 - k0
    qb = query_g[:, :, :, s:e].reshape(b, hkv, rep * n_q, d)
    scores = torch.matmul(qb, key[:, :, k0:k1].transpose(-1, -2)).view(b, hkv, rep, n_q, n_k)
    if softcap is not None:
        scores = torch.tanh(scores * (scaling / softcap)) * softcap
    masked = False
    if causal:
        off = T - L
        if k1 - 1 > s + off:  # some key of the range is after some query of the block
            # keys before c0 are visible to every query of the block, so only the tile [c0, k1) can hold
            # masked pairs: key j = c0 + c is masked for query i = s + r when c - r >= s + off - c0 + 1
            c0 = max(s + off, k0)
            scores[..., c0 - k0:].masked_fill_(_upper(n_q, k1 - c0, s + off - c0 + 1, key.device),
                                               float("-inf"))
    elif attn_mask is not None:
        m = attn_mask[..., s:e, k0:k1]
        if m.dim() == 2:
            m = m[None, None]
        m = m[:, :, None] if m.shape[1] == 1 else m.reshape(m.shape[0], hkv, rep, n_q, n_k)
        if float_mask:
            scores = scores + m.to(scores.dtype)
        else:
            scores = scores.masked_fill(~m, float("-inf"))
            masked = True
    if scores.dtype in (torch.float16, torch.bfloat16):
        p = torch.softmax(scores, dim=-1, dtype=torch.float32).to(scores.dtype)
    else:
        p = torch.softmax(scores, dim=-1)
    if masked:
        p = torch.nan_to_num(p, nan=0.0)  # fully masked rows attend nothing (output 0)
    if dropout > 0.0:
        p = torch.nn.functional.dropout(p, p=dropout, training=True)
    return p


def prepare(query, key, value, *, attn_mask, is_causal, scaling, softcap, dropout, features=None):
    """Shared preamble of the surface kernels and the walls -> (key, value, features, query_g, common):
    scaling d^-1/2 by default; SDPA's empty-static-cache crop (causal, no mask, T > L: keys to L);
    mask cropped to T; query_g (b, Hkv, rep, L, d) pre-scaled unless soft-capping; common: weights_block's."""
    b, H, L, d = query.shape
    hkv, T = key.shape[1], key.shape[2]
    if scaling is None:
        scaling = d ** -0.5
    if is_causal and attn_mask is None and L > 1 and T > L:
        key, value, T = key[:, :, :L], value[:, :, :L], L
        if features is not None:
            features = features[:, :, :L]
    causal = bool(is_causal and attn_mask is None and L > 1)
    float_mask = attn_mask is not None and attn_mask.dtype != torch.bool
    if attn_mask is not None:
        attn_mask = attn_mask[..., :T]
    query_g = query.view(b, hkv, H // hkv, L, d)
    if softcap is None:
        query_g = query_g * scaling
    common = dict(scaling=scaling, softcap=softcap, causal=causal, attn_mask=attn_mask, float_mask=float_mask,
                  dropout=dropout, L=L, T=T)
    return key, value, features, query_g, common


def query_blocks(L: int, block: int, common: dict):
    """(s0, e0, key range or None) for each block of ``block`` queries: the keys those queries can see."""
    for s0 in range(0, L, block):
        e0 = min(L, s0 + block)
        yield s0, e0, key_range(common["causal"], common["attn_mask"], common["float_mask"], s0, e0, L,
                                 common["T"])
