"""The arithmetic of a served surfaces layer (channel layout): key features into value channels, and the
per-query epilogue Δo_hd = Σ_a B_a(q_hd) Σ_b C_hdab F_hdb; compiled CPU kernels where they apply, PyTorch
ops elsewhere. No vLLM import.
"""

from __future__ import annotations

import torch

from geosteer.kernels import exact
from geosteer.kernels.bspline import bspline_basis

Grid = tuple[int, float, float]  # (grid_size, lo, hi)


def channel_count(grids: list[Grid]) -> int:
    """C: the value channel plus K = grid_size + 3 channels per grid."""
    return 1 + sum(g + 3 for g, _, _ in grids)


def value_channels(kh: torch.Tensor, vh: torch.Tensor, grids: list[Grid]) -> torch.Tensor:
    """(n, hkv, C, d) from keys and values (n, hkv, d): v, then v ⊙ B_b(k) for each grid's bases b."""
    n, hkv, d = vh.shape
    out = vh.new_empty(n, hkv, channel_count(grids), d)
    out[:, :, 0] = vh
    c = 1
    for g, lo, hi in grids:
        K = g + 3
        # (n, hkv, d, K+1): v⊙B_0(k) … v⊙B_{K-1}(k), v (fp32; half inputs are computed in fp32)
        feats = exact.key_features(kh.unsqueeze(2), vh.unsqueeze(2), g, lo, hi).view(n, hkv, d, K + 1)
        out[:, :, c:c + K] = feats[..., :K].transpose(2, 3)
        c += K
    return out


def surface_delta(f: torch.Tensor, q: torch.Tensor, coeff: torch.Tensor, grid: Grid) -> torch.Tensor:
    """Δo (n, H, d) from one grid's attended channels ``f`` (n, hkv, K, rep, d), post-RoPE queries ``q``
    (n, H, d) with H = hkv·rep, and the surfaces ``coeff`` (H, d, K, K)."""
    g, lo, hi = grid
    n, hkv, K, rep, d = f.shape
    H = hkv * rep
    qf = q.float()
    coeff = coeff.to(device=q.device, dtype=torch.float32)
    ext = exact.ext_for(qf, lo, hi)
    if ext is None:
        fo = f.permute(0, 1, 3, 4, 2).reshape(n, H, d, K).float()
        qc = torch.einsum("nhda,hdab->nhdb", bspline_basis(qf, g, lo, hi), coeff)
        return (fo * qc).sum(-1).to(q.dtype)
    # the kernel's layout: (B, H, queries, d, K+1) with the value in the last slot (not read here: the
    # stock part of the output is the caller's, so the slot only has to be finite)
    buf = qf.new_empty(n, hkv, rep, d, K + 1)
    buf[..., :K] = f.permute(0, 1, 3, 4, 2)
    buf[..., K] = 0.0
    sc, off = exact.grid_affine(g, lo, hi)
    delta = exact.epilogue(ext, buf.view(n, H, 1, d, K + 1), qf.view(n, H, 1, d), coeff, g, sc, off, False)
    return delta.view(n, H, d).to(q.dtype)
