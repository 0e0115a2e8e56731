"""Rank-r surfaces on GPUs (Triton): the r + 1-slice forward, fused (inference only).

    out = low_rank_attention_triton(q, k, v, U, W, grid_size, lo, hi, is_causal=True)

Same contract as :func:`geosteer.kernels.low_rank.low_rank_attention` and the exact Triton forward. No
backward: with autograd the bank runs the exact fused kernels on the truncated coefficients (same values).
"""

from __future__ import annotations

import torch

from geosteer.errors import GeosteerError
from geosteer.kernels.triton import _SPLIT_MIN_KEYS, _blocks, _kernels, _launch, triton_cdiv


def _narrow_kernels():
    _kernels()  # the missing-package error, once
    from geosteer.kernels import triton_low_rank_kernels

    return triton_low_rank_kernels


def _factor(x: torch.Tensor, name: str, shape: tuple, device) -> torch.Tensor:
    if tuple(x.shape) != shape:
        raise GeosteerError(f"{name} must have shape (heads, head_dim, K, rank) = {shape}, got {tuple(x.shape)}")
    return x.detach().to(device=device, dtype=torch.float32).contiguous()


def low_rank_attention_triton(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, U: torch.Tensor,
                              W: torch.Tensor, grid_size: int, lo, hi, *, attn_mask: torch.Tensor | None = None,
                              is_causal: bool = False, scaling: float | None = None, softcap: float | None = None,
                              sliding_window: int | None = None, with_value: bool = True, split: int | None = None,
                              block_m: int | None = None, block_n: int | None = None,
                              dv: int | None = None) -> torch.Tensor:
    """Rank-r modulated attention output (b, L, H, d) in the query's dtype.

    ``U``, ``W`` (H, d, K, r); ``split``: key chunks for decoding (None: by length on CUDA, as the exact
    kernel); ``block_m``/``block_n``/``dv``: tile sizes (queries, keys, value dims per program). Inference
    only: refuses inputs that need gradients."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value, U, W)):
        raise GeosteerError("the rank-r Triton kernel has no backward; for gradients use "
                            "modulated_attention_triton on the coefficients U Wᵀ")
    b, H, L, D = query.shape
    K, r = int(grid_size) + 3, U.shape[-1]
    uf = _factor(U, "U", (H, D, K, r), query.device)
    wf = _factor(W, "W", (H, D, K, r), query.device)
    a = _launch(query, key, value, None, grid_size, lo, hi, attn_mask, is_causal, scaling, softcap, sliding_window)
    q, k, v, mk, T = a["q"], a["k"], a["v"], a["mk"], a["T"]
    rb = 1 << (r - 1).bit_length()
    if dv is None and query.device.type == "cuda":
        dv = 64 if rb <= 2 else 32  # the accumulators are (BLOCK_M, (rb + 1)·DV) per program
    bm, bn, bd, DV = _blocks(query, L, D, block_m, block_n, dv)
    n_dv = triton_cdiv(D, DV)
    out = torch.empty(b, L, H, D, device=query.device, dtype=torch.float32)
    flags = {n: a["flags"][n] for n in ("CAUSAL", "MASK_KIND", "SOFTCAP", "WINDOW", "D")}
    flags.update(G=int(grid_size), K=K, R=r, RB=rb, BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=bd, DV=DV)
    if split is None:
        split = max(1, min(64, T // _SPLIT_MIN_KEYS)) if (L <= 16 and query.device.type == "cuda") else 1
    tk = _narrow_kernels()
    rep, n_m = H // k.shape[1], triton_cdiv(L, bm)
    if split <= 1:
        tk._fwd_narrow[(n_m, b * H, n_dv)](q, k, v, uf, wf, mk, out, L, T, H, rep, *a["scalars"].values(),
                                           *a["strides"], out.stride(0), out.stride(1), out.stride(2),
                                           WITH_VALUE=with_value, **flags)
        return out.to(query.dtype)
    chunk = triton_cdiv(triton_cdiv(T, split), bn) * bn
    split, LP = triton_cdiv(T, chunk), n_m * bm
    f32 = dict(device=query.device, dtype=torch.float32)
    pm, pl = torch.empty(split, b * H, LP, **f32), torch.empty(split, b * H, LP, **f32)
    pv, ps = torch.empty(split, b * H, LP, n_dv * DV, **f32), torch.empty(split, b * H, LP, rb, n_dv * DV, **f32)
    tk._partial_narrow[(n_m, b * H, split * n_dv)](q, k, v, wf, mk, pm, pl, pv, ps, L, T, H, rep, n_dv, chunk, LP,
                                                   *a["scalars"].values(), *a["strides"], **flags)
    tk._combine_narrow[(n_m, b * H, n_dv)](q, uf, pm, pl, pv, ps, out, L, H, split, n_dv, LP, a["scalars"]["sc"],
                                           a["scalars"]["off"], q.stride(0), q.stride(1), q.stride(2),
                                           out.stride(0), out.stride(1), out.stride(2), WITH_VALUE=with_value,
                                           **{n: flags[n] for n in ("G", "K", "R", "RB", "BLOCK_M", "BLOCK_D",
                                                                    "DV", "D")})
    return out.to(query.dtype)
