"""Fused modulated attention on GPUs (Triton): forward, split-K decode, backward, row log-sum-exp.

    out = modulated_attention_triton(q, k, v, coeff, grid_size, lo, hi, is_causal=True)

Same contract as :func:`geosteer.kernels.exact.modulated_attention`, plus ``sliding_window``;
``coeff=None`` is stock attention (with its log-sum-exp). The backward (``triton_backward``) recomputes the
weights from the row log-sum-exp; only kernels whose inputs need gradients run. Dropout takes the PyTorch path.
"""

from __future__ import annotations

import importlib.util
import os

import torch

_SPLIT_MIN_KEYS = 1024  # decoding: split the cache over programs once it has this many keys


def available() -> bool:
    """Whether Triton is importable."""
    return importlib.util.find_spec("triton") is not None


def interpreted() -> bool:
    """Whether the kernels run in Triton's CPU interpreter (``TRITON_INTERPRET=1`` before the import)."""
    return _kernels().INTERPRETED


def _kernels():
    from geosteer.extras import MissingDependency

    try:
        from geosteer.kernels import triton_kernels
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] == "triton":
            raise MissingDependency("the Triton surface backend needs the package 'triton', which is not "
                                    "installed: pip install 'geosteer[gpu]'") from None
        raise
    return triton_kernels


def applies(query: torch.Tensor, lo, hi, dropout: float = 0.0) -> bool:
    """Whether the fused kernels can run this call: CUDA (or CPU under the interpreter), a scalar grid
    range, no dropout, Triton importable."""
    if dropout or not available():
        return False
    if (torch.is_tensor(lo) and lo.numel() != 1) or (torch.is_tensor(hi) and hi.numel() != 1):
        return False
    if query.device.type == "cuda":
        return True
    return query.device.type == "cpu" and os.environ.get("TRITON_INTERPRET", "0") not in ("", "0") and \
        interpreted()


def _mask_args(attn_mask: torch.Tensor | None, T: int):
    """(kind, tensor, strides (b, h, i, j)): 0 none, 1 boolean keep-mask, 2 additive; broadcast dims stride 0."""
    if attn_mask is None:
        return 0, None, (0, 0, 0, 0)
    m = attn_mask[..., :T]
    while m.dim() < 4:
        m = m.unsqueeze(0)
    kind = 1 if m.dtype == torch.bool else 2
    if kind == 1:
        m = m.view(torch.uint8)
    strides = tuple(0 if m.shape[a] == 1 else m.stride(a) for a in range(4))
    return kind, m, strides


def _blocks(query: torch.Tensor, L: int, D: int, block_m, block_n, dv):
    """(BLOCK_M, BLOCK_N, BLOCK_D, DV): powers of two ≥ 16 (the products' minimum on a GPU)."""
    bd = max(16, 1 << (D - 1).bit_length())
    if query.device.type == "cuda":
        bm, bn, c = block_m or (16 if L <= 16 else 32), block_n or 32, dv or min(bd, 32)
    else:  # interpreter: few, large programs are the fastest
        bm, bn, c = block_m or 32, block_n or 32, dv or bd
    return bm, bn, bd, min(c, bd)


def _launch(query, key, value, coeff, grid_size, lo, hi, attn_mask, is_causal, scaling, softcap, sliding_window):
    """What the forward and backward launches share: the inputs (keys cropped by SDPA's convention for a
    purely causal call with T > L), the scalar arguments, the strides and the compile-time flags."""
    b, H, L, D = query.shape
    T = key.shape[2]
    if is_causal and attn_mask is None and L > 1 and T > L:  # SDPA's convention (see sdpa.prepare)
        key, value, T = key[:, :, :L], value[:, :, :L], L
    causal = bool(is_causal and attn_mask is None and L > 1)
    window = int(sliding_window or 0) if causal else 0
    has_surf = coeff is not None
    G = int(grid_size)
    K = G + 3 if has_surf else 1
    sc = G / (float(hi) - float(lo))
    cf = coeff.detach().to(device=query.device, dtype=torch.float32).contiguous() if has_surf else \
        query.new_zeros(1, dtype=torch.float32)
    kind, mk, sm = _mask_args(attn_mask, T)
    if mk is None:
        mk = query.new_zeros(1, dtype=torch.uint8)
    q, k, v = (t.detach() if t.stride(-1) == 1 else t.detach().contiguous() for t in (query, key, value))
    scalars = dict(offset=T - L, scale=float(scaling if scaling is not None else D ** -0.5),
                   softcap=float(softcap or 1.0), sc=sc, off=3.0 - float(lo) * sc, window=window)
    strides = (q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
               v.stride(0), v.stride(1), v.stride(2), *sm)
    flags = dict(G=G, K=K, KB=1 << (K - 1).bit_length() if has_surf else 1, HAS_SURF=has_surf, CAUSAL=causal,
                 MASK_KIND=kind, SOFTCAP=softcap is not None, WINDOW=window > 0, D=D)
    return dict(q=q, k=k, v=v, cf=cf, mk=mk, T=T, scalars=scalars, strides=strides, flags=flags)


def _forward(query, key, value, coeff, grid_size, lo, hi, *, attn_mask, is_causal, scaling, softcap,
             sliding_window, with_value, split, block_m, block_n, dv):
    """The kernel launch(es): (out (b, L, H, d) fp32, lse (b, H, L) fp32)."""
    tk = _kernels()
    b, H, L, D = query.shape
    a = _launch(query, key, value, coeff, grid_size, lo, hi, attn_mask, is_causal, scaling, softcap,
                sliding_window)
    q, k, v, cf, mk, T, common, strides = (a[n] for n in ("q", "k", "v", "cf", "mk", "T", "scalars", "strides"))
    hkv, sc, off = k.shape[1], common["sc"], common["off"]
    bm, bn, bd, DV = _blocks(query, L, D, block_m, block_n, dv)
    n_dv = triton_cdiv(D, DV)
    out = torch.empty(b, L, H, D, device=query.device, dtype=torch.float32)
    lse = torch.empty(b, H, L, device=query.device, dtype=torch.float32)
    n_m = triton_cdiv(L, bm)
    flags = dict(a["flags"], BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=bd, DV=DV)
    G, K, KB, has_surf = flags["G"], flags["K"], flags["KB"], flags["HAS_SURF"]
    if split is None:
        split = max(1, min(64, T // _SPLIT_MIN_KEYS)) if (L <= 16 and query.device.type == "cuda") else 1
    if split <= 1:
        tk._fwd[(n_m, b * H, n_dv)](q, k, v, cf, mk, out, lse, L, T, H, H // hkv, n_dv, *common.values(), *strides,
                                   out.stride(0), out.stride(1), out.stride(2), WITH_VALUE=with_value,
                                   STORE_LSE=True, **flags)
        return out, lse
    chunk = triton_cdiv(triton_cdiv(T, split), bn) * bn
    split = triton_cdiv(T, chunk)
    LP = n_m * bm
    f32 = dict(device=query.device, dtype=torch.float32)
    pm, pl = torch.empty(split, b * H, LP, **f32), torch.empty(split, b * H, LP, **f32)
    pv = torch.empty(split, b * H, LP, n_dv * DV, **f32)
    pf = torch.empty(split, b * H, LP, KB, n_dv * DV, **f32)
    tk._partial[(n_m, b * H, split * n_dv)](q, k, v, mk, pm, pl, pv, pf, L, T, H, H // hkv, n_dv, chunk, LP,
                                           *common.values(), *strides, **flags)
    tk._combine[(n_m, b * H, n_dv)](q, cf, pm, pl, pv, pf, out, lse, L, H, split, n_dv, LP, sc, off,
                                   q.stride(0), q.stride(1), q.stride(2), out.stride(0), out.stride(1),
                                   out.stride(2), G=G, K=K, KB=KB, HAS_SURF=has_surf, WITH_VALUE=with_value,
                                   STORE_LSE=True, BLOCK_M=bm, BLOCK_D=bd, DV=DV, D=D)
    return out, lse


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _backward(query, key, value, coeff, out, lse, g_out, opts, need_q_c: bool, need_kv: bool):
    """The backward launches: (dq, dk, dv, dC) fp32 (None where not needed); keys cropped by the forward's
    convention get zero gradients."""
    from geosteer.kernels import triton_backward as tb

    b, H, L, D = query.shape
    a = _launch(query, key, value, coeff, opts["grid_size"], opts["lo"], opts["hi"], opts["attn_mask"],
                opts["is_causal"], opts["scaling"], opts["softcap"], opts["sliding_window"])
    q, k, v, T = a["q"], a["k"], a["v"], a["T"]
    hkv = k.shape[1]
    bm, bn, bd, _ = _blocks(query, L, D, None, None, None)
    if query.device.type == "cuda":
        bm = bn = 16  # the widened accumulators are (16, KB·BLOCK_D) per program
    flags = dict(a["flags"], KB=max(16, a["flags"]["KB"]) if coeff is not None else 1,
                 WITH_VALUE=opts["with_value"], BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=bd)
    g = g_out.float()
    if g.stride(-1) != 1:
        g = g.contiguous()
    args = (q, k, v, a["cf"], a["mk"], g, out, lse)
    tail = (L, T, H, H // hkv, *a["scalars"].values(), *a["strides"], g.stride(0), g.stride(1), g.stride(2),
            out.stride(0), out.stride(1), out.stride(2))
    f32 = dict(device=query.device, dtype=torch.float32)
    dq = dc = dk = dv = None
    if need_q_c:
        dq = torch.empty(b, H, L, D, **f32)
        dc = torch.zeros(a["cf"].shape, **f32)
        tb._bwd_dq[(triton_cdiv(L, bm), b * H)](*args, dq, dc, *tail, **flags)
    if need_kv:
        dk = torch.zeros(b, hkv, key.shape[2], D, **f32)
        dv = torch.zeros(b, hkv, key.shape[2], D, **f32)
        dk_t, dv_t = (x[:, :, :T] if T < key.shape[2] else x for x in (dk, dv))
        if T < key.shape[2]:
            dk_t, dv_t = dk_t.contiguous(), dv_t.contiguous()
        tb._bwd_dkdv[(triton_cdiv(T, bn), b * hkv)](*args, dk_t, dv_t, *tail, **flags)
        if T < key.shape[2]:
            dk[:, :, :T], dv[:, :, :T] = dk_t, dv_t
    return dq, dk, dv, dc


class _Fused(torch.autograd.Function):
    """Triton forward and backward (``triton_backward``: p recomputed from the saved row log-sum-exp)."""

    @staticmethod
    def forward(ctx, query, key, value, coeff, opts):
        out, lse = _forward(query, key, value, coeff, **opts)
        ctx.save_for_backward(query, key, value, coeff, out, lse)
        ctx.opts = opts
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, g_out, _g_lse):
        q, k, v, c, out, lse = ctx.saved_tensors
        nq, nk, nv, nc = ctx.needs_input_grad[:4]
        dq, dk, dv, dc = _backward(q, k, v, c, out, lse, g_out, ctx.opts, nq or nc, nk or nv)
        cast = [None if (t is None or not need) else t.to(x.dtype)
                for t, need, x in ((dq, nq, q), (dk, nk, k), (dv, nv, v), (dc, nc, c))]
        return (*cast, None)


def modulated_attention_triton(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                               coeff: torch.Tensor | None, grid_size: int, lo, hi, *,
                               attn_mask: torch.Tensor | None = None, is_causal: bool = False,
                               scaling: float | None = None, softcap: float | None = None,
                               sliding_window: int | None = None, with_value: bool = True,
                               return_lse: bool = False, split: int | None = None, block_m: int | None = None,
                               block_n: int | None = None, dv: int | None = None):
    """Modulated attention output (b, L, H, d) in the query's dtype (and the row lse (b, H, L) fp32).

    ``coeff`` (H, d, K, K) or None (stock attention); ``split``: key chunks for decoding (None: by length
    on CUDA); ``block_m``/``block_n``/``dv``: tile sizes (queries, keys, value dims per program).
    """
    opts = dict(grid_size=grid_size, lo=float(lo), hi=float(hi), attn_mask=attn_mask, is_causal=bool(is_causal),
                scaling=scaling, softcap=softcap, sliding_window=sliding_window, with_value=with_value,
                split=split, block_m=block_m, block_n=block_n, dv=dv)
    tensors = [query, key, value] + ([coeff] if coeff is not None else [])
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        out, lse = _Fused.apply(query, key, value, coeff, opts)
    else:
        out, lse = _forward(query, key, value, coeff, **opts)
    out = out.to(query.dtype)
    return (out, lse) if return_lse else out
