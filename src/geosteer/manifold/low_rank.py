"""Rank-r surfaces: each K×K coefficient matrix C_d truncated to its r largest singular values.

S_d(q, k) = B(q)ᵀ C_d B(k) = Σ_s σ_s (B(q)·u_s)(B(k)·w_s), so a rank-r bank has
1 + S ≈ 1 + Σ_{s ≤ r} (B(q)·u_s)(B(k)·w_s): attention then multiplies [v, v⊙(B(k)·w_1), …] of r + 1 slices
instead of K + 1 (the FLOP floor of ``benchmarks/manifold_speed.py`` with K replaced by r). Here the
truncation is computed and measured (discarded singular-value energy, next-token KL against the exact bank
on held-out text). A bank from :func:`low_rank_bank` runs the exact kernels on the truncated coefficients
unless ``narrow=True``: then its inference forwards run :func:`low_rank_attention` (PyTorch ops, r + 1
slices, no decode feature cache; with autograd or on the Triton backend still the exact kernels). On the
CPU at 512 tokens the compiled exact kernels are the faster of the two (docs/manifold-speed.md).
"""

from __future__ import annotations

import copy

import torch


def truncate(coefficients: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(rank-r coefficients, discarded energy per layer).

    ``coefficients`` (layers, heads, dim, K, K); the SVD runs in float64 per (layer, head, dim) matrix. The
    discarded energy of a layer is Σ σ_s² over s > r divided by Σ σ_s², summed over its matrices (0 for an
    all-zero layer): the squared Frobenius error of the truncation relative to the layer's coefficients.
    """
    K = coefficients.shape[-1]
    if int(rank) != rank or not 1 <= rank <= K:
        raise ValueError(f"rank must be an integer in 1 … {K} (K = grid size + 3), got {rank}")
    c = coefficients.detach().double()
    u, s, vh = torch.linalg.svd(c)
    kept = (u[..., :rank] * s[..., None, :rank]) @ vh[..., :rank, :]
    total = (s * s).flatten(1).sum(1)
    dropped = (s[..., rank:] ** 2).flatten(1).sum(1)
    energy = torch.where(total > 0, dropped / total.clamp_min(1e-300), torch.zeros_like(total))
    return kept.to(coefficients.dtype), energy.float()


def low_rank_bank(bank, rank: int, narrow: bool = False):
    """A copy of ``bank`` with rank-r coefficients; ``meta["low_rank"]`` holds the rank and the discarded
    energy per layer. Walls and ranges are kept. ``narrow``: inference runs :func:`low_rank_attention`
    (r + 1 slices, PyTorch ops) instead of the exact kernels on the truncated coefficients (same values)."""
    coeff, energy = truncate(bank.coefficients, rank)
    out = copy.deepcopy(bank)
    out.clear_cache()
    with torch.no_grad():
        out.coefficients.copy_(coeff)
    out.meta = dict(bank.meta, low_rank={"rank": int(rank), "discarded_energy": energy.tolist(),
                                         "layers": list(bank.layers)})
    out.rank = int(rank) if narrow and rank < bank.K else None
    return out


def next_token_kl(model, exact, approx, ids: torch.Tensor) -> float:
    """Mean over positions of KL(P_exact ‖ P_approx) of the next-token distributions (nats) on ``ids``.
    The model must carry no bank (each is attached in turn; ``manifold.uninstall`` first)."""
    from geosteer.interventions import steer

    with torch.no_grad():
        with steer(model, exact):
            lp = torch.log_softmax(model(ids, use_cache=False).logits.float(), -1)
        with steer(model, approx):
            lq = torch.log_softmax(model(ids, use_cache=False).logits.float(), -1)
    return float((lp.exp() * (lp - lq)).sum(-1).clamp_min(0.0).mean())


def rank_report(model, bank, ranks, ids: torch.Tensor) -> list[dict]:
    """Error against rank: one record per rank (discarded energy overall and per layer, next-token KL)."""
    total = (bank.coefficients.detach().double() ** 2).flatten(1).sum(1)
    rows = []
    for r in ranks:
        approx = low_rank_bank(bank, r)
        e = torch.tensor(approx.meta["low_rank"]["discarded_energy"], dtype=torch.float64)
        overall = float((e * total).sum() / total.sum()) if float(total.sum()) > 0 else 0.0
        rows.append({"rank": int(r), "discarded_energy": overall, "discarded_energy_per_layer": e.tolist(),
                     "next_token_kl": next_token_kl(model, bank, approx, ids), "tokens": int(ids.numel())})
    return rows


def factors(coefficients: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(U, W), each (..., K, r), with U Wᵀ the rank-r truncation of C (√σ on each side)."""
    u, s, vh = torch.linalg.svd(coefficients.detach().double())
    root = s[..., :rank].sqrt()
    dt = coefficients.dtype
    w = vh[..., :rank, :].transpose(-1, -2) * root[..., None, :]
    return (u[..., :rank] * root[..., None, :]).to(dt), w.to(dt)


def _projected(x: torch.Tensor, F: torch.Tensor, grid_size: int, lo, hi) -> torch.Tensor:
    """B(x_d)·F[g, r, d, :, s] for x (b, hkv, rep|1, n, d) and F (hkv, rep, d, K, r): (b, hkv, rep, n, d, r).

    Uses the 4 non-zero bases: rows a0 … a0+3 of F (zero-padded by 3 on both sides) looked up per entry."""
    from geosteer.manifold.bspline import bspline_local

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


def low_rank_attention(query, key, value, U, W, grid_size: int, lo, hi, *, attn_mask=None, is_causal=False,
                       scaling=None, softcap=None, with_value: bool = True, block: int = 128) -> torch.Tensor:
    """Modulated attention (b, L, H, d) with rank-r surfaces C = U Wᵀ (U, W: (H, d, K, r)), r + 1 slices.

    Key side per query head: [v⊙(B(k)·w_1), …, v⊙(B(k)·w_r), v]; one product of each query block's
    attention weights with it, then o = o_v + Σ_s (B(q)·u_s) o_s. Same masks, scaling, soft-capping and GQA
    as :func:`geosteer.manifold.kernel.modulated_attention`, whose private helpers give the weights.
    """
    from geosteer.manifold.kernel import _prepare, _query_blocks, _weights_block

    dtype = query.dtype
    if dtype in (torch.float16, torch.bfloat16):
        query, key, value = query.float(), key.float(), value.float()
        attn_mask = attn_mask if attn_mask is None or attn_mask.dtype == torch.bool else attn_mask.float()
    key, value, _, query_g, common = _prepare(query, key, value, attn_mask=attn_mask, is_causal=is_causal,
                                              scaling=scaling, softcap=softcap, dropout=0.0)
    b, H, L, d = query.shape
    hkv, rep = query_g.shape[1], query_g.shape[2]
    r = U.shape[-1]
    gk = _projected(key[:, :, None], W.view(hkv, rep, d, -1, r), grid_size, lo, hi)  # (b, hkv, rep, T, d, r)
    v6 = value[:, :, None, :, :, None]
    feats = torch.cat((gk * v6, v6.expand(-1, -1, rep, -1, -1, 1)), -1).reshape(b, hkv, rep, key.shape[2],
                                                                                d * (r + 1))
    qf = _projected(query.view(b, hkv, 1, rep, L, d)[:, :, 0], U.view(hkv, rep, d, -1, r), grid_size, lo, hi)
    outs = []
    for s0, e0, rng in _query_blocks(L, block, common):
        if rng is None:
            outs.append(query.new_zeros(b, hkv, rep, e0 - s0, d))
            continue
        k0, k1 = rng
        p = _weights_block(query_g, key, s0, e0, k0, k1, **common)  # (b, hkv, rep, n_q, n_k)
        o = torch.matmul(p, feats[:, :, :, k0:k1]).view(b, hkv, rep, e0 - s0, d, r + 1)
        delta = (o[..., :r] * qf[:, :, :, s0:e0]).sum(-1)
        outs.append(o[..., r] + delta if with_value else delta)
    out = torch.cat(outs, dim=3) if len(outs) > 1 else outs[0]
    return out.reshape(b, H, L, d).transpose(1, 2).contiguous().to(dtype)
