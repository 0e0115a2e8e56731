"""Exact value-modulated attention in factored form (paper Eq. 2), never building (b, h, q, k, d).

    o_id = Σ_j a_ij v_jd (1 + S_d(q_id, k_jd)),   S_d(q, k) = Σ_ab C_dab B_a(q) B_b(k)
         = (A V)_id + Σ_b Qf_idb · F_idb,   Qf_idb = Σ_a C_dab B_a(q_id),   F_idb = Σ_j a_ij v_jd B_b(k_jd)

Layout: the key side is one matrix per KV head, ``Vaug[j, d·(K+1) + c]`` = v_jd·B_c(k_jd) for c < K and
v_jd for c = K (computed once per KV head, shared by its n_rep query heads, and cached across
decode steps). Queries are processed in blocks; each block multiplies its attention weights by the key
range it can see only (causal / sliding-window / padding masks: fully masked key ranges are skipped), so
a causal forward costs about half of a dense one and memory stays linear in the sequence length.

The attention weights a_ij are those of the stock SDPA path: same scaling, boolean or additive mask
(causal, sliding window, padding), optional soft-capping, GQA (query head h reads KV head h // n_rep), and
the stock path's convention for a purely causal call whose key is longer than the query (keys cropped).
"""

from __future__ import annotations

import torch

from geosteer.manifold.bspline import bspline_basis, bspline_local

DEFAULT_BLOCK = 128


def key_features(key: torch.Tensor, value: torch.Tensor, grid_size: int, lo, hi,
                 with_value: bool = True) -> torch.Tensor:
    """Key-side features (b, Hkv, T, d·C) with C = K + 1 (``with_value``) or K.

    Per (j, d) the C columns are v_jd·B_0(k_jd) … v_jd·B_{K-1}(k_jd) followed (``with_value``) by v_jd.
    """
    K = grid_size + 3
    a0, w = bspline_local(key, grid_size, lo, hi)  # (b, Hkv, T, d), (..., 4)
    # Scatter the four local weights into a table padded by 3 on each side (basis a at column a + 3);
    # the padding columns collect the pieces of non-existent bases and are dropped.
    idx = (a0 + 3).unsqueeze(-1) + torch.arange(4, device=key.device)
    table = torch.zeros(*key.shape, K + 6, dtype=w.dtype, device=key.device).scatter(-1, idx, w)
    if with_value:
        table[..., K + 3] = 1.0
        feats = table[..., 3 : K + 4]
    else:
        feats = table[..., 3 : K + 3]
    out = feats * value.unsqueeze(-1)
    b, hk, t, _ = key.shape
    return out.reshape(b, hk, t, -1)


def query_features(query: torch.Tensor, coeff: torch.Tensor, grid_size: int, lo, hi) -> torch.Tensor:
    """``Qf`` (..., H, L, d, K): Σ_a C[h, d, a, :] B_a(q) for query (b, H, L, d), coeff (H, d, K, K)."""
    bq = bspline_basis(query, grid_size, lo, hi)  # (b, H, L, d, K)
    return torch.einsum("bhlda,hdac->bhldc", bq, coeff.to(bq.dtype))


def _mask_for_block(attn_mask, b, hkv, rep, s, e, k0, k1):
    """The mask rows of queries [s, e) and keys [k0, k1), shaped to broadcast over (b, Hkv, rep, L, n)."""
    m = attn_mask[..., s:e, k0:k1]
    if m.dim() == 2:
        m = m[None, None]
    if m.shape[1] == 1:
        return m[:, :, None]  # (b|1, 1, 1, L, n)
    return m.reshape(m.shape[0], hkv, rep, e - s, k1 - k0)


def modulated_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    coeff: torch.Tensor,
    grid_size: int,
    lo,
    hi,
    *,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scaling: float | None = None,
    softcap: float | None = None,
    dropout: float = 0.0,
    features: torch.Tensor | None = None,
    with_value: bool = True,
    block: int = DEFAULT_BLOCK,
) -> torch.Tensor:
    """Modulated attention output (b, L, H, d), the layout transformers expects from an attention function.

    ``query`` (b, H, L, d) post-RoPE; ``key``/``value`` (b, Hkv, T, d) before GQA expansion; ``coeff``
    (H, d, K, K). ``is_causal`` follows SDPA (only used without a mask). ``features``: precomputed
    :func:`key_features` for these keys (decode cache). ``with_value=False`` returns only Δo (the caller
    adds the stock output).
    """
    b, H, L, d = query.shape
    hkv, T = key.shape[1], key.shape[2]
    rep = H // hkv
    K = grid_size + 3
    C1 = K + 1 if with_value else K
    if scaling is None:
        scaling = d ** -0.5
    if is_causal and attn_mask is None and L > 1 and T > L:
        # stock SDPA convention (empty static cache prefill): keys cropped to the query length
        key, value, T = key[:, :, :L], value[:, :, :L], L
        if features is not None:
            features = features[:, :, :L]
    causal = bool(is_causal and attn_mask is None and L > 1)
    if features is None:
        features = key_features(key, value, grid_size, lo, hi, with_value=with_value)
    float_mask = attn_mask is not None and attn_mask.dtype != torch.bool
    if attn_mask is not None:
        attn_mask = attn_mask[..., :T]
    qg = query.reshape(b, hkv, rep, L, d)
    cf = coeff.to(query.dtype)
    outs = []
    for s in range(0, L, block):
        e = min(L, s + block)
        n_q = e - s
        if causal:
            k0, k1 = 0, min(T, e + (T - L))
        elif attn_mask is not None and not float_mask:
            cols = attn_mask[..., s:e, :].reshape(-1, n_q, T).any(dim=0).any(dim=0)
            nz = torch.nonzero(cols)
            if nz.numel() == 0:
                outs.append(query.new_zeros(b, hkv, rep, n_q, d))
                continue
            k0, k1 = int(nz[0]), int(nz[-1]) + 1
        else:
            k0, k1 = 0, T
        n_k = k1 - k0
        qb = qg[:, :, :, s:e]  # (b, hkv, rep, n_q, d)
        kb = key[:, :, k0:k1]
        scores = torch.matmul(qb.reshape(b, hkv, rep * n_q, d), kb.transpose(-1, -2)) * scaling
        scores = scores.view(b, hkv, rep, n_q, n_k)
        if softcap is not None:
            scores = torch.tanh(scores / softcap) * softcap
        masked = False
        if causal:
            i = torch.arange(s, e, device=query.device)[:, None] + (T - L)
            j = torch.arange(k0, k1, device=query.device)[None, :]
            scores = scores.masked_fill(j > i, float("-inf"))
        elif attn_mask is not None:
            m = _mask_for_block(attn_mask, b, hkv, rep, s, e, k0, k1)
            if float_mask:
                scores = scores + m.to(scores.dtype)
            else:
                scores = scores.masked_fill(~m, float("-inf"))
                masked = True
        if scores.dtype in (torch.float16, torch.bfloat16):
            p = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
        else:
            p = torch.softmax(scores, dim=-1)
        if masked or float_mask:
            p = torch.nan_to_num(p, nan=0.0)  # fully masked rows attend nothing (output 0)
        if dropout > 0.0:
            p = torch.nn.functional.dropout(p, p=dropout, training=True)
        o = torch.matmul(p.view(b, hkv, rep * n_q, n_k), features[:, :, k0:k1])
        o = o.view(b, hkv, rep, n_q, d, C1)
        qf = query_features(qb.reshape(b, H, n_q, d), cf, grid_size, lo, hi).view(b, hkv, rep, n_q, d, K)
        if with_value:
            out = o[..., K] + (o[..., :K] * qf).sum(-1)
        else:
            out = (o * qf).sum(-1)
        outs.append(out)
    out = torch.cat(outs, dim=3) if len(outs) > 1 else outs[0]  # (b, hkv, rep, L, d)
    return out.reshape(b, H, L, d).transpose(1, 2).contiguous()


def naive_modulated_attention(weights: torch.Tensor, query, key, value, coeff, grid_size, lo, hi):
    """Per-pair reference (b, L, H, d): o_id = Σ_j a_ij v_jd (1 + S_d(q_id, k_jd)). Small shapes only.

    ``weights`` are the stock attention weights (b, H, L, T), e.g. ``geosteer.attention.attention_weights``.
    """
    b, H, L, d = query.shape
    rep = H // key.shape[1]
    from geosteer.attention import repeat_kv

    k = repeat_kv(key, rep)
    v = repeat_kv(value, rep)
    bq = bspline_basis(query, grid_size, lo, hi)  # (b, H, L, d, K)
    bk = bspline_basis(k, grid_size, lo, hi)  # (b, H, T, d, K)
    S = torch.einsum("bhida,hdac,bhjdc->bhijd", bq, coeff.to(bq.dtype), bk)  # (b, H, L, T, d)
    o = torch.einsum("bhij,bhjd,bhijd->bhid", weights, v, 1.0 + S)
    return o.transpose(1, 2)
