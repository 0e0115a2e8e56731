"""Value-space quantities inside one attention call (paper Section 4.2, Eqs. 7-10), GQA-aware.

Per-head tensors are (b, Hkv, n_rep, q, ·): head h is ``[:, h // n_rep, h % n_rep]``. ``self_weight`` gives
A_tt = exp(s_tt − lse_t) with the log-sum-exp over blocks of query rows (no full attention matrix).
"""

from __future__ import annotations

import torch

from geosteer.attention import AttentionCall, additive_mask


def grouped_query(call: AttentionCall) -> torch.Tensor:
    """(b, Hkv, n_rep, q, d) view of the query."""
    b, h, q, d = call.query.shape
    return call.query.reshape(b, call.key.shape[1], h // call.key.shape[1], q, d)


def own_values(call: AttentionCall) -> torch.Tensor:
    """v_t for each query position (end-aligned with the keys, as with a KV cache): (b, Hkv, 1, q, dv)."""
    q_len, k_len = call.query.shape[2], call.value.shape[2]
    return call.value[:, :, None, k_len - q_len:]


def grouped_output(out: torch.Tensor, call: AttentionCall) -> torch.Tensor:
    """Attention output (b, q, H, dv) as transformers returns it → (b, Hkv, n_rep, q, dv)."""
    b, q, h, dv = out.shape
    return out.permute(0, 2, 1, 3).reshape(b, call.key.shape[1], h // call.key.shape[1], q, dv)


def _mask_block(call: AttentionCall, i0: int, i1: int, k_len: int) -> torch.Tensor | None:
    """Boolean keep-mask for query rows [i0, i1) shaped to broadcast with (b, Hkv, n_rep, rows, k)."""
    m = call.attention_mask
    q_len = call.query.shape[2]
    if m is not None:
        m = m[..., i0:i1, :k_len]
        if m.dtype != torch.bool:
            m = m > torch.finfo(m.dtype).min / 2
        b, hm = m.shape[0], m.shape[1]
        if hm == 1:
            return m[:, :, None]
        return m.reshape(b, call.key.shape[1], hm // call.key.shape[1], i1 - i0, k_len)
    if q_len == 1 or not getattr(call.module, "is_causal", True):
        return None
    offset = k_len - q_len
    i = torch.arange(i0, i1, device=call.query.device)[:, None] + offset
    j = torch.arange(k_len, device=call.query.device)[None, :]
    return (j <= i)[None, None, None]


def self_weight(call: AttentionCall, block_rows: int = 128) -> torch.Tensor:
    """A_tt (b, Hkv, n_rep, q): the weight each query puts on its own key, as the stock softmax gives it.

    Computed as exp(s_tt − logsumexp_j s_tj) with the row log-sum-exp taken over blocks of ``block_rows``
    query rows (never the full q × k score matrix). Rows with no visible key get 0.
    """
    qg = grouped_query(call).float()
    key = call.key.float()
    scale = call.effective_scaling
    q_len, k_len = qg.shape[3], key.shape[2]
    k_diag = key[:, :, None, k_len - q_len:]  # (b, Hkv, 1, q, d)
    s_diag = (qg * k_diag).sum(-1) * scale
    lse = torch.empty_like(s_diag)
    kt = key[:, :, None].transpose(-1, -2)  # (b, Hkv, 1, d, k)
    offset = k_len - q_len
    # purely causal call: row block [i0, i1) sees every key < i0 + offset and a lower-triangular tile of
    # the next i1 - i0 keys; later keys are never scored and only the tile needs a mask
    causal_only = call.attention_mask is None and q_len > 1 and getattr(call.module, "is_causal", True)
    for i0 in range(0, q_len, block_rows):
        i1 = min(q_len, i0 + block_rows)
        rows = qg[..., i0:i1, :] * scale
        if causal_only:
            a0, a1 = i0 + offset, i1 + offset
            tile = rows @ kt[..., a0:a1]
            tri = torch.ones(i1 - i0, a1 - a0, dtype=torch.bool, device=tile.device).tril()
            out = torch.logsumexp(tile.masked_fill(~tri, float("-inf")), dim=-1)
            if a0 > 0:
                out = torch.logaddexp(out, torch.logsumexp(rows @ kt[..., :a0], dim=-1))
            lse[..., i0:i1] = out
            continue
        scores = rows @ kt
        m = _mask_block(call, i0, i1, k_len)
        if m is not None:
            scores = scores.masked_fill(~m, float("-inf"))
        lse[..., i0:i1] = torch.logsumexp(scores, dim=-1)
    a = torch.exp(s_diag - lse)
    diag_visible = _diag_visible(call, q_len, k_len)
    if diag_visible is not None:
        a = torch.where(diag_visible, a, torch.zeros_like(a))
    return torch.nan_to_num(a, nan=0.0)


def self_weight_from_lse(call: AttentionCall, lse: torch.Tensor) -> torch.Tensor:
    """A_tt (b, Hkv, n_rep, q) = exp(s_tt − lse_t) from the attention kernel's own row log-sum-exp
    ``lse`` (b, H, q) (``geosteer.attention.stock_attention_with_lse``): an O(q·d) epilogue. A query whose
    own key is masked, or that sees no key at all (lse = −inf), gets 0."""
    qg = grouped_query(call).float()
    key = call.key.float()
    q_len, k_len = qg.shape[3], key.shape[2]
    s_diag = (qg * key[:, :, None, k_len - q_len:]).sum(-1) * call.effective_scaling
    b, hkv, r = qg.shape[:3]
    lse = lse.float().reshape(b, hkv, r, q_len)
    a = torch.exp(s_diag - torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse)))
    keep = torch.isfinite(lse)
    diag_visible = _diag_visible(call, q_len, k_len)
    if diag_visible is not None:
        keep = keep & diag_visible
    return torch.where(keep, a, torch.zeros_like(a))


def _diag_visible(call: AttentionCall, q_len: int, k_len: int) -> torch.Tensor | None:
    """Whether query t may see its own key under the call's mask: (b|1, Hkv|1, n_rep|1, q) or None."""
    m = call.attention_mask
    if m is None:
        return None
    offset = k_len - q_len
    idx = torch.arange(q_len, device=m.device)
    diag = m[..., idx, idx + offset]
    if diag.dtype != torch.bool:
        diag = diag > torch.finfo(diag.dtype).min / 2
    b, hm = diag.shape[0], diag.shape[1]
    if hm == 1:
        return diag[:, :, None]
    return diag.reshape(b, call.key.shape[1], hm // call.key.shape[1], q_len)


def sees_only_itself(call: AttentionCall) -> torch.Tensor:
    """Whether query t's only visible key is its own (b|1, q): then o_t = v_t, A_tt = 1 and the cross-token
    aggregate c_t = o_t − A_tt v_t is zero by construction (e.g. the first token of a window), so its
    direction (∥/⊥ ratio, |cos|) is undefined whatever rounding leaves in the float values."""
    q_len, k_len = call.query.shape[2], call.key.shape[2]
    dev = call.query.device
    m = call.attention_mask
    if m is None:
        causal = q_len > 1 and getattr(call.module, "is_causal", True)
        first = torch.arange(q_len, device=dev) + (k_len - q_len) == 0
        return (first if causal or k_len == 1 else torch.full((q_len,), k_len == 1, device=dev))[None]
    keep = m[..., :q_len, :k_len]
    if keep.dtype != torch.bool:
        keep = keep > torch.finfo(keep.dtype).min / 2
    idx = torch.arange(q_len, device=dev)
    alone = (keep.sum(-1) == 1) & keep[..., idx, idx + (k_len - q_len)]  # (b|1, h|1, q)
    return alone.all(dim=1)


def without_diagonal_mask(call: AttentionCall) -> torch.Tensor:
    """The call's boolean keep-mask (b|1, 1|H, q, k) without each query's own key (diag-removal control)."""

    q_len, k_len = call.query.shape[2], call.key.shape[2]
    m = additive_mask(call, q_len, k_len)
    idx = torch.arange(q_len, device=call.query.device)
    eye = torch.zeros(q_len, k_len, dtype=torch.bool, device=call.query.device)
    eye[idx, idx + (k_len - q_len)] = True
    if m is None:
        return ~eye[None, None]
    return m & ~eye
