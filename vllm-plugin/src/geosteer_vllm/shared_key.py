"""Served surfaces with shared keys: the surfaces' Δo from vLLM's own paged KV cache, keys stored once.

The layer keeps vLLM's stock attention and cache; for a recipe's rows Δo = Σ_j a_ij v_j S(q_i, k_j) comes
from the paged cache (``block_table``, ``seq_lens``), through the compiled kernel (``serve.paged_kernel``)
and ``kernels.exact``'s epilogue, or the PyTorch form (``COMPILED = False``). :func:`supported` names the
rule (vLLM's float32 CPU layout); elsewhere the channel layout of ``serve.layers``. No vLLM import.
"""

from __future__ import annotations

import torch

from geosteer.kernels import exact, ext
from geosteer_vllm import paged_kernel

COMPILED = True  # False: the PyTorch path below (tests compare both)
LAYOUTS = ("vec", "vec16")  # vLLM CPU attention ISAs whose float32 key/value layout is the one read here


def supported(on_cpu: bool, dtype: torch.dtype, kv_cache_dtype: str, isa: str | None) -> bool:
    """The rule for the shared-key path: vLLM's CPU backend, float32 model and cache, a known cache layout."""
    return on_cpu and dtype == torch.float32 and kv_cache_dtype in ("auto", "float32") and isa in LAYOUTS


def compiled_available() -> bool:
    """Whether the compiled kernels of this path (``serve.paged_kernel`` and geosteer's epilogue) are built;
    without them the channel layout is faster than this path's PyTorch ops."""

    return paged_kernel.get() is not None and ext.get() is not None


def gather(kv_cache: torch.Tensor, block_table: torch.Tensor, seq_lens: torch.Tensor, T: int):
    """Keys and values (b, hkv, T, d) of the sequences of ``block_table``/``seq_lens`` (b rows) from the paged
    cache (blocks, hkv, block_size, 2·d); positions at or past a sequence's length are zero."""
    nb, hkv, bs, d2 = kv_cache.shape
    d = d2 // 2
    kv = kv_cache.view(nb, hkv, 2 * bs, d)
    keys = kv[:, :, :bs].view(nb, hkv, bs * d).view(nb, hkv, d, bs)
    values = kv[:, :, bs:]
    pos = torch.arange(T, device=kv_cache.device)
    blk = block_table[:, pos // bs].long()  # (b, T)
    off = (pos % bs).expand_as(blk)
    k = keys[blk, :, :, off]  # (b, T, hkv, d)
    v = values[blk, :, off]
    valid = (pos < seq_lens[:, None]).view(-1, T, 1, 1)
    k = torch.where(valid, k, 0.0).transpose(1, 2).contiguous()
    v = torch.where(valid, v, 0.0).transpose(1, 2).contiguous()
    return k, v


def _mask(seq_lens: torch.Tensor, q_lens: torch.Tensor, L: int, T: int, window: int) -> torch.Tensor:
    """(b, 1, L, T) True where query i (the i-th of the sequence's last q_len positions) sees key j."""
    i = torch.arange(L).view(1, L, 1)
    j = torch.arange(T).view(1, 1, T)
    qpos = (seq_lens - q_lens).view(-1, 1, 1) + i
    m = (j <= qpos) & (j < seq_lens.view(-1, 1, 1))
    if window > 0:
        m &= j > qpos - window
    return m.unsqueeze(1)


def surface_delta(op, q: torch.Tensor, rows: torch.Tensor, meta, kv_cache: torch.Tensor, *, scale: float,
                  softcap: float | None, window: int) -> torch.Tensor:
    """Δo (m, H, d) of the surfaces ``op`` for the token rows ``rows`` (m,) of the flat batch, whose post-RoPE
    queries are ``q`` (m, H, d); every sequence with a row here has all its rows here, in batch order."""
    qsl = meta.query_start_loc.long()
    seq_lens = meta.seq_lens.long()
    seq = torch.searchsorted(qsl[1:], rows, right=True)
    mod = paged_kernel.get() if COMPILED else None
    ext = exact.ext_for(q, op.lo, op.hi) if mod is not None else None
    if ext is not None:
        pos = seq_lens[seq] - (qsl[seq + 1] - qsl[seq]) + (rows - qsl[seq])
        o = paged_kernel.attended_features(mod, q, kv_cache, meta.block_table, seq, pos, scale=scale,
                                           softcap=softcap, window=window, grid=(op.grid_size, op.lo, op.hi))
        m, H, d = q.shape
        sc, off = exact.grid_affine(op.grid_size, op.lo, op.hi)
        delta = exact.epilogue(ext, o.view(m, H, 1, d, op.K + 1), q.contiguous().view(m, H, 1, d),
                                 op.coeff.to(q.dtype), op.grid_size, sc, off, False)
        return delta.view(m, H, d)
    seqs = torch.unique_consecutive(seq)
    q_lens = qsl[seqs + 1] - qsl[seqs]
    first = torch.searchsorted(rows, qsl[seqs])  # each sequence's first row in ``rows``
    out = q.new_zeros(q.shape)
    kw = dict(scaling=scale, softcap=softcap, with_value=False)
    args = (op.coeff.to(q.dtype), op.grid_size, op.lo, op.hi)
    dec = q_lens == 1
    if dec.any():
        s, at = seqs[dec], first[dec]
        T = int(seq_lens[s].max())
        k, v = gather(kv_cache, meta.block_table[s], seq_lens[s], T)
        mask = _mask(seq_lens[s], q_lens[dec], 1, T, window)
        o = exact.modulated_attention(q[at].unsqueeze(2), k, v, *args, attn_mask=mask, **kw)
        out[at] = o[:, 0]
    for s, at, L in zip(seqs[~dec].tolist(), first[~dec].tolist(), q_lens[~dec].tolist(), strict=True):
        S = int(seq_lens[s])
        k, v = gather(kv_cache, meta.block_table[s:s + 1], seq_lens[s:s + 1], S)
        mask = _mask(seq_lens[s:s + 1], q_lens.new_tensor([L]), L, S, window)
        o = exact.modulated_attention(q[at:at + L].transpose(0, 1).unsqueeze(0), k, v, *args, attn_mask=mask,
                                       **kw)
        out[at:at + L] = o[0]
    return out
