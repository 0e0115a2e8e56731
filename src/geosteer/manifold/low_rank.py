"""Rank-r surfaces: each K×K coefficient matrix C_d truncated to its r largest singular values.

S_d(q, k) = Σ_s σ_s (B(q)·u_s)(B(k)·w_s), so attention multiplies r + 1 slices instead of K + 1. Here the
truncation is computed and measured (discarded energy, next-token KL); a bank from :func:`low_rank_bank`
runs :mod:`geosteer.kernels.low_rank` (or its Triton form); with autograd on Triton or ``narrow=False`` the
exact kernels run on the truncated coefficients (same values).
"""

from __future__ import annotations

import copy

import torch

from geosteer.interventions import steer


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


def low_rank_bank(bank, rank: int, narrow: bool = True):
    """A copy of ``bank`` with rank-r coefficients; ``meta["low_rank"]`` holds the rank and the discarded
    energy per layer. Walls and ranges are kept. ``narrow``: inference runs
    :func:`~geosteer.kernels.low_rank.low_rank_attention` (r + 1 slices) instead of the exact kernels on the
    truncated coefficients (same values)."""
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
