"""Formula checks of paper 1 (``geosteer study checks``): each returns its largest absolute error against an
independent reference (scipy's B-spline basis, the per-pair kernel, the stock model)."""

from __future__ import annotations

import torch

from geosteer.attention import AttentionCall, attention_weights

TEXTS = ("The theory of relativity states that the laws of physics are the same for all observers.",
         "She saw the man with the telescope.")


def _random_bank(model, seed: int = 0, scale: float = 0.5, **kw):
    from geosteer import manifold

    bank = manifold.install(model, **kw)
    with torch.no_grad():
        bank.coefficients.copy_(torch.randn(bank.coefficients.shape, generator=torch.Generator().manual_seed(seed))
                                * scale)
    return bank


def basis_vs_scipy() -> float:
    """Cubic B-spline basis (App. A) against ``scipy.interpolate.BSpline.basis_element``, float64, on four
    grids including the knots and both support ends."""
    from geosteer.kernels.bspline import bspline_basis, bspline_basis_reference

    worst = 0.0
    for g, lo, hi in ((8, -4.0, 4.0), (1, -1.0, 2.0), (16, -3.0, 5.0), (5, 0.5, 0.75)):
        h = (hi - lo) / g
        x = torch.linspace(lo - 4 * h, hi + 4 * h, 3001, dtype=torch.float64)
        x = torch.cat([x, torch.tensor([lo - 3 * h, hi + 3 * h, lo, hi, lo + h], dtype=torch.float64)])
        ref = torch.from_numpy(bspline_basis_reference(x.numpy(), g, lo, hi))
        worst = max(worst, (bspline_basis(x, g, lo, hi) - ref).abs().max().item())
    return worst


def model_vs_per_pair(model, tok) -> float:
    """Eq. 1 in the model: logits with random surfaces (grid range ±3) against the same model whose attention
    computes Σ_j a_ij v_jd (1 + S) pair by pair (padded positions left out)."""
    from geosteer import manifold
    from geosteer_paper.reproduction.references import per_pair_handlers

    enc = tok(list(TEXTS), return_tensors="pt", padding=True)
    _random_bank(model, grid_range=(-3.0, 3.0))
    try:
        with torch.no_grad():
            ours = model(**enc).logits
            base = manifold.uninstall(model)
            removers = per_pair_handlers(model, base)
            try:
                ref = model(**enc).logits
            finally:
                for r in removers:
                    r()
    finally:
        manifold.uninstall(model)
    keep = enc.attention_mask.bool()
    return (ours - ref)[keep].abs().max().item()


def zero_surfaces_vs_stock(model, tok) -> float:
    """C = 0: logits with zero surfaces installed against the stock model's (bit-identical expected)."""
    from geosteer import manifold

    ids = tok(list(TEXTS[:1]), return_tensors="pt").input_ids
    with torch.no_grad():
        ref = model(ids).logits
        manifold.install(model)
        try:
            out = model(ids).logits
        finally:
            manifold.uninstall(model)
    return (out - ref).abs().max().item()


class _Causal(torch.nn.Module):
    is_causal = True


def _kernel_case(L: int = 23, T: int = 23, scale: float = 2.0, dtype=torch.float32, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    b, H, Hkv, d = 2, 6, 2, 8  # grouped queries (3 per kv head)
    q = torch.randn(b, H, L, d, generator=g, dtype=dtype) * scale
    k = torch.randn(b, Hkv, T, d, generator=g, dtype=dtype) * scale
    v = torch.randn(b, Hkv, T, d, generator=g, dtype=dtype)
    C = torch.randn(H, d, 11, 11, generator=g, dtype=dtype) * 0.5
    return q, k, v, C


def factored_vs_per_pair() -> float:
    """Eq. 2: the factored kernel against the per-pair reference on causal, left-padded, sliding-window and
    decode (3 queries on 23 keys) masks, two block sizes."""
    from geosteer.kernels.exact import modulated_attention, naive_modulated_attention
    from geosteer_paper.reproduction.references import keep_mask

    worst = 0.0
    for kind in ("causal", "padding", "window", "decode"):
        L = 3 if kind == "decode" else 23
        q, k, v, C = _kernel_case(L=L)
        mask = {"causal": None, "padding": keep_mask(2, L, 23, [0, 5]),
                "window": keep_mask(2, L, 23, [2, 0], window=6),
                "decode": keep_mask(2, L, 23, [0, 3])}[kind]
        w = attention_weights(AttentionCall(_Causal(), q, k, v, mask, None, 0.0))
        ref = naive_modulated_attention(w, q, k, v, C, 8, -4.0, 4.0)
        for block in (5, 128):
            with torch.no_grad():
                out = modulated_attention(q, k, v, C, 8, -4.0, 4.0, attn_mask=mask, is_causal=mask is None,
                                          block=block)
            worst = max(worst, (out - ref).abs().max().item())
    return worst


def factored_gradients_vs_per_pair() -> float:
    """Eq. 2's gradients (q, k, v, C) against autograd through the per-pair reference, float64."""
    from geosteer.kernels.exact import modulated_attention, naive_modulated_attention

    q, k, v, C = (t.requires_grad_() for t in _kernel_case(L=7, T=7, scale=1.5, dtype=torch.float64))
    out = modulated_attention(q, k, v, C, 8, -4.0, 4.0, is_causal=True, block=3)
    w = attention_weights(AttentionCall(_Causal(), q, k, v, None, None, 0.0))
    ref = naive_modulated_attention(w, q, k, v, C, 8, -4.0, 4.0)
    gw = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    g1 = torch.autograd.grad((out * gw).sum(), (q, k, v, C))
    g2 = torch.autograd.grad((ref * gw).sum(), (q, k, v, C))
    return max((a - b).abs().max().item() for a, b in zip(g1, g2, strict=True))
