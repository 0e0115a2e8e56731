"""Exact region walls (``geosteer.manifold.walls``) as extra value channels of vLLM's paged attention.

Each walled (h, d) gets one slot per set of walls a query can fall in, carrying
v_jd·m_j, 1 − m_j and v_jd·m_j·B_b(k_jd), m_j = 1[k_jd in no k-range] (masked by zeroing); for a query in the
slot's q-ranges the walled output A·(v m) + Σ_a B_a(q_id) Σ_b C_hdab A·(v m B_b) replaces the unwalled one
where A·(1 − m) > 0, as ``walls.apply_walls`` does. No vLLM import.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from geosteer.errors import GeosteerError
from geosteer.kernels.bspline import bspline_basis

MAX_OVERLAP = 12  # walls on one (head, dim): the slot table has 2**R rows per pair


@dataclass
class WallOp:
    """One recipe's walls on one layer. P walled pairs, S slots; ``width`` scalars per KV head."""

    heads: torch.Tensor  # (P,) query head of each walled pair
    dims: torch.Tensor  # (P,)
    qboxes: torch.Tensor  # (P, R, 2) float64 q-ranges; unused rows empty (lo = +inf > hi = -inf)
    slot_of: torch.Tensor  # (P, 2**R) slot of each set of walls holding q (bit r: wall r), -1: none
    slot_pair: torch.Tensor  # (S,) the pair of each slot
    kboxes: torch.Tensor  # (S, R, 2) float64 k-ranges blocked in each slot; unused rows empty
    slot_pos: torch.Tensor  # (S,) first scalar of each slot in its KV head's block
    width: int
    rep: int  # query heads per KV head
    coeff: torch.Tensor | None  # (S, K, K) C_hd of each slot's pair; None: no surfaces on this layer
    grid_size: int
    lo: float
    hi: float
    source: tuple | None = field(default=None, repr=False, compare=False)  # (LayerWalls, coeff) compiled here

    @property
    def per_slot(self) -> int:
        return 2 + (0 if self.coeff is None else self.grid_size + 3)

    def channels(self, head_dim: int) -> int:
        """Value channels (of ``head_dim`` scalars) each KV head needs for these walls."""
        return -(-self.width // head_dim)


def _query_cases(qb: list[tuple[float, float]]) -> list[int]:
    """The sets of walls (bit masks) that some finite q lies in, from their closed q-ranges."""
    points = sorted({x for lo, hi in qb for x in (lo, hi) if math.isfinite(x)})
    probes = [0.0] if not points else [points[0] - 1.0, points[-1] + 1.0, *points]
    probes += [(a + b) / 2 for a, b in zip(points, points[1:], strict=False)]
    codes: list[int] = []
    for x in probes:
        code = sum(1 << r for r, (lo, hi) in enumerate(qb) if lo <= x <= hi)
        if code and code not in codes:
            codes.append(code)
    return codes


def wall_op(lw, coeff: torch.Tensor | None, grid_size: int, lo: float, hi: float, rep: int) -> WallOp:
    """Compile one layer's walls (``manifold.walls.LayerWalls``) with its surfaces ``coeff`` (H, d, K, K)
    (None: none on this layer) for KV groups of ``rep`` query heads."""
    P, R = lw.heads.numel(), lw.regions.shape[1]
    if R > MAX_OVERLAP:
        raise GeosteerError(f"{R} walls on one (head, dim) of a layer cannot be served on vLLM (at most "
                            f"{MAX_OVERLAP}); merge overlapping walls")
    empty = (math.inf, -math.inf)
    qboxes = torch.tensor(empty, dtype=torch.float64).repeat(P, R, 1)
    slot_of = torch.full((P, 1 << R), -1, dtype=torch.long)
    pairs, kboxes = [], []
    for p in range(P):
        reg = lw.regions[p].tolist()
        qb = [(a, b) if a <= b else empty for a, b, _, _ in reg]
        qboxes[p] = torch.tensor(qb, dtype=torch.float64)
        for code in _query_cases(qb):
            slot_of[p, code] = len(pairs)
            pairs.append(p)
            kboxes.append([(reg[r][2], reg[r][3]) if code >> r & 1 else empty for r in range(R)])
    per = 2 + (0 if coeff is None else grid_size + 3)
    groups = (lw.heads // rep)[pairs].tolist()
    count: dict[int, int] = {}
    pos = []
    for g in groups:
        pos.append(count.get(g, 0) * per)
        count[g] = count.get(g, 0) + 1
    slot_pair = torch.tensor(pairs, dtype=torch.long)
    c = None if coeff is None else coeff[lw.heads[slot_pair], lw.dims[slot_pair]].float().clone()
    return WallOp(lw.heads.clone(), lw.dims.clone(), qboxes, slot_of, slot_pair,
                  torch.tensor(kboxes, dtype=torch.float64).reshape(len(pairs), R, 2),
                  torch.tensor(pos, dtype=torch.long), max(count.values(), default=0) * per, rep, c, grid_size, lo,
                  hi, (lw, coeff))


def _inside(x: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    """(…, R) whether x (…) lies in each closed range of ``boxes`` (…, R, 2), compared in float64."""
    x = x.double().unsqueeze(-1)
    return (x >= boxes[..., 0]) & (x <= boxes[..., 1])


def wall_values(op: WallOp, kh: torch.Tensor, vh: torch.Tensor, head_dim: int) -> torch.Tensor:
    """(n, hkv, channels, head_dim): each slot's scalars in its KV head's block (zeros elsewhere).
    ``kh``/``vh`` (n, hkv, head_dim): post-RoPE keys and values."""
    n, hkv, _ = kh.shape
    if not op.slot_pair.numel():  # no walls on this rank's heads (it keeps the other ranks' channel count)
        return vh.new_zeros(n, hkv, op.channels(head_dim), head_dim)
    g = op.heads[op.slot_pair].to(kh.device) // op.rep
    d = op.dims[op.slot_pair].to(kh.device)
    kk, vv = kh[:, g, d], vh[:, g, d]  # (n, S)
    blocked = _inside(kk, op.kboxes.to(kh.device)).any(-1)
    kept = vv.masked_fill(blocked, 0.0)
    cols = [kept, blocked.to(vh.dtype)]
    if op.coeff is not None:
        basis = bspline_basis(kk.float(), op.grid_size, op.lo, op.hi).to(vh.dtype)  # (n, S, K)
        cols += list((kept.unsqueeze(-1) * basis).unbind(-1))
    vals = torch.stack(cols, -1)  # (n, S, per_slot)
    c = op.channels(head_dim)
    idx = (g * (c * head_dim) + op.slot_pos.to(kh.device)).unsqueeze(-1) + torch.arange(op.per_slot, device=kh.device)
    buf = vh.new_zeros(n, hkv * c * head_dim)
    buf.index_copy_(1, idx.reshape(-1), vals.reshape(n, -1))
    return buf.view(n, hkv, c, head_dim)


def apply_walls(op: WallOp, out: torch.Tensor, ow: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``out`` (n, H, d) with the walls applied. ``ow`` (n, hkv, channels, rep, d): the attention output of
    this op's channels (per query head); ``q`` (n, H, d) the post-RoPE queries."""
    n, hkv, c, rep, d = ow.shape
    if not op.slot_pair.numel():
        return out
    flat = ow.permute(0, 1, 3, 2, 4).reshape(n, hkv * rep, c * d)  # row g * rep + r = query head
    dev = out.device
    h = op.heads[op.slot_pair].to(dev)
    cols = op.slot_pos.to(dev).unsqueeze(-1) + torch.arange(op.per_slot, device=dev)
    f = flat[:, h.unsqueeze(-1), cols].float()  # (n, S, per_slot)
    val = f[..., 0]
    if op.coeff is not None:
        qq = q[:, h, op.dims[op.slot_pair].to(dev)].float()
        qfac = torch.einsum("nsa,sab->nsb", bspline_basis(qq, op.grid_size, op.lo, op.hi), op.coeff.to(dev))
        val = val + (qfac * f[..., 2:]).sum(-1)
    sees_blocked = f[..., 1] > 0
    hp, dp = op.heads.to(dev), op.dims.to(dev)
    qv = q[:, hp, dp]
    bits = 1 << torch.arange(op.qboxes.shape[1], device=dev)
    code = (_inside(qv, op.qboxes.to(dev)).long() * bits).sum(-1)  # (n, P)
    slot = op.slot_of.to(dev)[torch.arange(hp.numel(), device=dev), code]
    has = slot >= 0
    slot = slot.clamp(min=0)
    replace = has & sees_blocked.gather(1, slot)
    out = out.clone()
    out[:, hp, dp] = torch.where(replace, val.gather(1, slot).to(out.dtype), out[:, hp, dp])
    return out
