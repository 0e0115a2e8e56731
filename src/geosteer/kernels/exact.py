"""Exact value-modulated attention in factored form (paper Eq. 2), never building (b, h, q, k, d).

    o_id = (A V)_id + Σ_a B_a(q_id) G_ida,   G_ida = Σ_b C_dab F_idb,   F_idb = Σ_j a_ij v_jd B_b(k_jd)

Key features ``feats[j, d·(K+1) + c]`` = v_jd·B_c(k_jd) (c < K) and v_jd (c = K), one matrix per KV head,
so one product gives A V and F; the query side gathers the 4 non-zero bases. Weights are the stock SDPA
path's (:mod:`geosteer.kernels.sdpa`), by query block over the visible keys only. Backends: ``triton``,
``cpu`` (compiled kernels), ``torch``; ``auto`` (or ``GEOSTEER_MANIFOLD_BACKEND`` unset) picks by device.
"""

from __future__ import annotations

import os

import torch

from geosteer.errors import GeosteerError
from geosteer.kernels import ext as extension
from geosteer.kernels import triton as fused
from geosteer.kernels.bspline import bspline_basis
from geosteer.kernels.sdpa import key_range, prepare, query_blocks, weights_block

DEFAULT_BLOCK = 128  # queries per block: measured best of 32–256 on the default model at 2 threads
_HALF = (torch.float16, torch.bfloat16)
SMALL_Q = 8  # at most this many queries (decoding): grouped layout, one pass over the key features


def _position(x: torch.Tensor, grid_size: int, lo, hi) -> tuple[torch.Tensor, torch.Tensor]:
    """Interval index s (float) and local coordinate t ∈ [0, 1) of x in knot units, u = (x - lo)/h + 3.

    u is clamped to [0, g+6]: below the support that gives s = 0, t = 0, where the only existing basis
    (B_0) has weight t³/6 = 0; above it s = g+6, where all four bases are past B_{K-1}. So the clamped
    values are exactly zero outside the support, without masks.
    """
    if torch.is_tensor(lo) or torch.is_tensor(hi):
        lo = torch.as_tensor(lo, dtype=x.dtype, device=x.device)
        hi = torch.as_tensor(hi, dtype=x.dtype, device=x.device)
        sc = grid_size / (hi - lo)
        u = (x - lo) * sc + 3.0
    else:
        sc = grid_size / (float(hi) - float(lo))
        u = x * sc + (3.0 - float(lo) * sc)
    u = u.clamp(0.0, grid_size + 6.0)
    s = torch.floor(u)
    return s, u - s


def _weights(t: torch.Tensor, dim: int) -> torch.Tensor:
    """The four uniform cubic B-spline pieces at local coordinate t, stacked on ``dim``."""
    t2 = t * t
    t3 = t2 * t
    m = 1.0 - t
    w0 = m * m * m * (1.0 / 6.0)
    w3 = t3 * (1.0 / 6.0)
    w1 = t3 * 0.5 - t2 + (2.0 / 3.0)
    w2 = 1.0 - w0 - w1 - w3
    return torch.stack((w0, w1, w2, w3), dim=dim)


def key_features(key: torch.Tensor, value: torch.Tensor, grid_size: int, lo, hi, *,
                 compiled: bool = True) -> torch.Tensor:
    """Key-side features (b, Hkv, T, d·(K+1)): per (j, d), v·B_0(k) … v·B_{K-1}(k), then v.

    bf16/fp16 keys and values are computed in fp32 (see :func:`modulated_attention`); ``compiled=False``:
    PyTorch ops only."""
    if key.dtype in _HALF:
        key, value = key.to(torch.float32), value.to(torch.float32)
    ext = ext_for(key, lo, hi) if compiled else None
    if ext is not None:
        sc, off = grid_affine(grid_size, lo, hi)
        b, hk, T, d = key.shape
        if torch.is_grad_enabled() and (key.requires_grad or value.requires_grad):
            f = extension.KeyFeatures.apply(ext, key, value, grid_size, sc, off)
        else:
            f = ext.key_features(key, value, grid_size, sc, off)
        return f.view(b, hk, T, -1)
    return key_features_torch(key, value, grid_size, lo, hi)


def key_features_torch(key: torch.Tensor, value: torch.Tensor, grid_size: int, lo, hi) -> torch.Tensor:
    """:func:`key_features` in PyTorch ops (differentiable)."""
    K = grid_size + 3
    s, t = _position(key, grid_size, lo, hi)
    w = _weights(t, dim=-1) * value.unsqueeze(-1)  # (b, hkv, T, d, 4)
    # basis index a = s - 3 + r; out-of-range ones go to column K, which is then overwritten by v
    idx = (s.to(torch.long) - 3).unsqueeze(-1) + torch.arange(4, device=key.device)
    idx = idx.clamp_(-1, K).remainder_(K + 1)
    feats = torch.zeros(*key.shape, K + 1, dtype=w.dtype, device=key.device)
    feats = feats.scatter(-1, idx, w)
    feats[..., K] = value
    b, hk, T, d = key.shape
    return feats.view(b, hk, T, d * (K + 1))


def _padded_coeff(coeff: torch.Tensor, hkv: int, rep: int) -> torch.Tensor:
    """(rep, hkv, d, K+2, K): C with a zero row before and after, heads ordered (r, g) for h = g·rep + r."""
    H, d, K, _ = coeff.shape
    c = coeff.view(hkv, rep, d, K, K).transpose(0, 1)
    return torch.nn.functional.pad(c, (0, 0, 1, 1))


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
    backend: str | None = None,
) -> torch.Tensor:
    """Modulated attention output (b, L, H, d), the layout transformers expects from an attention function.

    ``query`` (b, H, L, d) post-RoPE; ``key``/``value`` (b, Hkv, T, d) before GQA; ``coeff`` (H, d, K, K);
    ``features``: precomputed :func:`key_features`; ``with_value=False`` returns only Δo.
    """
    name = backend_choice(backend)
    if use_triton(name, query, lo, hi, dropout):
        return fused.modulated_attention_triton(query, key, value, coeff, grid_size, lo, hi, attn_mask=attn_mask,
                                                is_causal=is_causal, scaling=scaling, softcap=softcap,
                                                with_value=with_value)
    compiled = name != "torch"
    if query.dtype in _HALF:
        # bf16/fp16: positions on the knot grid need more than 8-11 mantissa bits (u = (x - lo)/h + 3 spans
        # 0..g+6) and the feature sums run over all keys, so the whole kernel runs in fp32 (the compiled
        # fp32 kernels on the CPU, PyTorch elsewhere) and the output comes back in the input dtype.
        f32 = torch.float32
        out = modulated_attention(
            query.to(f32), key.to(f32), value.to(f32), coeff, grid_size, lo, hi,
            attn_mask=attn_mask if attn_mask is None or attn_mask.dtype == torch.bool else attn_mask.to(f32),
            is_causal=is_causal, scaling=scaling, softcap=softcap, dropout=dropout,
            features=None if features is None else features.to(f32), with_value=with_value, block=block,
            backend=name or "cpu")
        return out.to(query.dtype)
    key, value, features, query_g, common = prepare(query, key, value, attn_mask=attn_mask, is_causal=is_causal,
                                                    scaling=scaling, softcap=softcap, dropout=dropout,
                                                    features=features)
    L = common["L"]
    if features is None:
        features = key_features(key, value, grid_size, lo, hi, compiled=compiled)
    coeff = coeff.to(query.dtype)
    ext = ext_for(query, lo, hi) if compiled else None
    if ext is not None and L > SMALL_Q:
        out = _blocked_ext(ext, query, query_g, key, features, coeff, grid_size, lo, hi, with_value, block,
                           common)
    elif L <= SMALL_Q:
        out = _small(ext, query, query_g, key, features, coeff, grid_size, lo, hi, with_value, common)
    else:
        out = _blocked(query, query_g, key, features, coeff, grid_size, lo, hi, with_value, block, common)
    return out


BACKENDS = ("triton", "torch", "cpu", "auto")


def backend_choice(backend: str | None = None) -> str | None:
    """The requested backend: the argument, else ``GEOSTEER_MANIFOLD_BACKEND``; None means automatic."""
    name = backend or os.environ.get("GEOSTEER_MANIFOLD_BACKEND") or None
    if name is not None and name not in BACKENDS:
        src = "backend" if backend else "GEOSTEER_MANIFOLD_BACKEND"
        raise GeosteerError(f"{src}={name!r} is not a surface backend; valid: {', '.join(BACKENDS)}")
    return None if name == "auto" else name


def use_triton(name: str | None, query: torch.Tensor, lo, hi, dropout: float = 0.0) -> bool:
    """Whether this call runs the fused Triton kernels (``name`` from :func:`backend_choice`).

    Forced (``triton``) on a device it cannot run on, or without Triton: a one-line error. Dropout > 0 and
    per-element grid ranges take the PyTorch path on any backend."""
    if name not in ("triton", None) or (name is None and query.device.type != "cuda"):
        return False
    if name is None:
        return fused.applies(query, lo, hi, dropout)
    if not fused.available():
        fused._kernels()  # raises the missing-package error
    if dropout or (torch.is_tensor(lo) and lo.numel() != 1) or (torch.is_tensor(hi) and hi.numel() != 1):
        return False
    if not fused.applies(query, lo, hi, dropout):
        raise GeosteerError(f"the triton surface backend runs on CUDA tensors (got {query.device.type}); on a CPU "
                            "set TRITON_INTERPRET=1 before the first use, or choose the backend torch or cpu")
    return True


def _small(ext, query, query_g, key, features, coeff, grid_size, lo, hi, with_value, common):
    """Few queries (decoding): grouped layout, one product per KV head."""
    b, H, L, d = query.shape
    hkv, rep = query_g.shape[1], query_g.shape[2]
    K = grid_size + 3
    rng = key_range(common["causal"], common["attn_mask"], common["float_mask"], 0, L, L, common["T"])
    if rng is None:
        return query.new_zeros(b, L, H, d)
    k0, k1 = rng
    p = weights_block(query_g, key, 0, L, k0, k1, **common)  # (b, hkv, rep, L, n_k)
    o = torch.matmul(p.reshape(b, hkv, rep * L, k1 - k0), features[:, :, k0:k1])
    o = o.view(b, H, L, d, K + 1)
    if ext is not None:
        sc, off = grid_affine(grid_size, lo, hi)
        return epilogue(ext, o, query, coeff, grid_size, sc, off, with_value).transpose(1, 2).contiguous()
    qf = torch.einsum("bhlda,hdac->bhldc", bspline_basis(query, grid_size, lo, hi), coeff)
    delta = (o[..., :K] * qf).sum(-1)
    out = o[..., K] + delta if with_value else delta
    return out.transpose(1, 2).contiguous()


def _blocked(query, query_g, key, features, coeff, grid_size, lo, hi, with_value, block, common):
    """Query blocks in the transposed layout (rep, b, hkv, d, ·, queries)."""
    b, H, L, d = query.shape
    hkv, rep = query_g.shape[1], query_g.shape[2]
    K = grid_size + 3
    D = d * (K + 1)
    grad = torch.is_grad_enabled()
    # query side, once per call: basis rows (into C padded by one zero row) and weights, (rep,b,hkv,d,4,L)
    q_t = query.view(b, hkv, rep, L, d).permute(2, 0, 1, 4, 3).contiguous()  # (rep, b, hkv, d, L)
    s, t = _position(q_t, grid_size, lo, hi)
    wq = _weights(t, dim=-2)
    iq = ((s.to(torch.long) - 2).unsqueeze(-2) + torch.arange(4, device=query.device)[:, None])
    iq = iq.clamp_(0, K + 1)
    cpad = _padded_coeff(coeff, hkv, rep)[:, None]  # (rep, 1, hkv, d, K+2, K)
    feats_t = features.transpose(-1, -2)  # (b, hkv, D, T)
    outs = []
    for s0, e0, rng in query_blocks(L, block, common):
        n_q = e0 - s0
        if rng is None:
            outs.append(query.new_zeros(rep, b, hkv, d, n_q))
            continue
        k0, k1 = rng
        p = weights_block(query_g, key, s0, e0, k0, k1, **common)  # (b, hkv, rep, n_q, n_k)
        ft = feats_t[..., k0:k1]
        if grad:
            o = torch.stack([torch.matmul(ft, p[:, :, r].transpose(-1, -2)) for r in range(rep)])
        else:
            o = query.new_empty(rep, b, hkv, D, n_q)
            for r in range(rep):
                torch.matmul(ft, p[:, :, r].transpose(-1, -2), out=o[r])
        o = o.view(rep, b, hkv, d, K + 1, n_q)
        g = torch.matmul(cpad, o[..., :K, :])  # (rep, b, hkv, d, K+2, n_q)
        sel = torch.gather(g, -2, iq[..., s0:e0])  # (rep, b, hkv, d, 4, n_q)
        delta = (sel * wq[..., s0:e0]).sum(-2)
        outs.append(o[..., K, :] + delta if with_value else delta)
    out = torch.cat(outs, dim=-1) if len(outs) > 1 else outs[0]  # (rep, b, hkv, d, L)
    return out.permute(1, 4, 2, 0, 3).reshape(b, L, H, d)


def _batched_mm(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x @ y over the leading (b, hkv) dimensions; on the CPU without autograd one GEMM per entry, whose
    time is steadier than ``bmm`` splitting a few batch entries over threads."""
    if torch.is_grad_enabled() or x.device.type != "cpu":
        return torch.matmul(x, y)
    b, h = x.shape[:2]
    out = x.new_empty(b, h, x.shape[2], y.shape[3])
    for i in range(b):
        for j in range(h):
            torch.mm(x[i, j], y[i, j], out=out[i, j])
    return out


def grid_affine(grid_size: int, lo, hi) -> tuple[float, float]:
    """(scale, offset) mapping a coordinate on [lo, hi] to the cubic B-spline grid's index space."""
    sc = grid_size / (float(hi) - float(lo))
    return sc, 3.0 - float(lo) * sc


USE_EXT = True  # set False to force the PyTorch path (tests compare both)


def ext_for(query: torch.Tensor, lo, hi):
    """The compiled CPU kernels (``geosteer.kernels.ext``) if they apply to this call, else None.

    They apply to float32 CPU queries with a scalar grid range, when built and not turned off (``USE_EXT``,
    ``GEOSTEER_NO_EXT=1``); callers then run :func:`epilogue` and the compiled key features."""
    if not USE_EXT or query.dtype != torch.float32 or query.device.type != "cpu":
        return None
    if (torch.is_tensor(lo) and lo.numel() != 1) or (torch.is_tensor(hi) and hi.numel() != 1):
        return None
    return extension.get()


def epilogue(ext, o: torch.Tensor, q: torch.Tensor, coeff: torch.Tensor, grid_size: int, sc: float, off: float,
             with_value: bool) -> torch.Tensor:
    """The query side in the compiled kernels ``ext`` (from :func:`ext_for`): out (B, H, n, D).

    ``o`` (B, H, n, D, K+1) holds the attended key features (the last slot: the stock output A V), ``q``
    (B, H, n, D) the queries, ``coeff`` (H, D, K, K) the surfaces, (``sc``, ``off``) = :func:`grid_affine`.
    out = A V + Σ_a B_a(q) Σ_b C_ab F_b, or the sum alone with ``with_value=False``; differentiable in
    ``o``, ``q`` and ``coeff`` when autograd is on."""
    if torch.is_grad_enabled() and (o.requires_grad or q.requires_grad or coeff.requires_grad):
        return extension.Epilogue.apply(ext, o, q, coeff, grid_size, sc, off, with_value)
    return ext.epilogue(o, q, coeff, grid_size, sc, off, with_value)


def _blocked_ext(ext, query, query_g, key, features, coeff, grid_size, lo, hi, with_value, block, common):
    """Query blocks, grouped layout, compiled epilogue."""
    b, H, L, d = query.shape
    hkv, rep = query_g.shape[1], query_g.shape[2]
    K = grid_size + 3
    sc, off = grid_affine(grid_size, lo, hi)
    outs = []
    for s0, e0, rng in query_blocks(L, block, common):
        n_q = e0 - s0
        if rng is None:
            outs.append(query.new_zeros(b, H, n_q, d))
            continue
        k0, k1 = rng
        p = weights_block(query_g, key, s0, e0, k0, k1, **common)  # (b, hkv, rep, n_q, n_k)
        o = _batched_mm(p.view(b, hkv, rep * n_q, k1 - k0), features[:, :, k0:k1]).view(b, H, n_q, d, K + 1)
        outs.append(epilogue(ext, o, query[:, :, s0:e0], coeff, grid_size, sc, off, with_value))
    out = torch.cat(outs, dim=2) if len(outs) > 1 else outs[0]
    return out.transpose(1, 2).contiguous()


def naive_modulated_attention(weights: torch.Tensor, query, key, value, coeff, grid_size, lo, hi):
    """Per-pair reference (b, L, H, d): o_id = Σ_j a_ij v_jd (1 + S_d(q_id, k_jd)). Small shapes only.

    ``weights`` are the stock attention weights (b, H, L, T), e.g. ``geosteer.attention.attention_weights``.
    """
    b, H, L, d = query.shape
    rep = H // key.shape[1]
    k = key.repeat_interleave(rep, dim=1)  # query head h reads KV head h // rep
    v = value.repeat_interleave(rep, dim=1)
    bq = bspline_basis(query, grid_size, lo, hi)  # (b, H, L, d, K)
    bk = bspline_basis(k, grid_size, lo, hi)  # (b, H, T, d, K)
    S = torch.einsum("bhida,hdac,bhjdc->bhijd", bq, coeff.to(bq.dtype), bk)  # (b, H, L, T, d)
    o = torch.einsum("bhij,bhjd,bhijd->bhid", weights, v, 1.0 + S)
    return o.transpose(1, 2)
