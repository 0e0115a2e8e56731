"""Walls that block: exact region walls on the value gain.

A wall over R = (layer, heads, dims, q-range, k-range) zeroes the gain of every pair inside it:

    o_id = Σ_j a_ij v_jd (1 + S_d(q_id, k_jd)) (1 − 1_R(q_id, k_jd))

Ranges are closed, may be infinite (past the grid) and default to the whole line; any layer may carry walls.
Blocked pairs are masked out of the weights of the walled (head, dim) pairs and those outputs recomputed
(``walled_output``), so a blocked pair contributes exactly 0; every other output is the unwalled one bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from geosteer.errors import GeosteerError
from geosteer.kernels.bspline import bspline_basis
from geosteer.kernels.sdpa import prepare, query_blocks, weights_block

_INF = math.inf
PAIR_CHUNK = 64  # walled (head, dim) pairs processed together (bounds memory: chunk × queries × keys)


def _bound(x, what: str) -> float:
    if x is None:
        return -_INF if what.endswith("lo") else _INF
    if isinstance(x, str):
        try:
            x = float(x)
        except ValueError:
            raise GeosteerError(f"wall {what} '{x}' is not a number") from None
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise GeosteerError(f"wall {what} must be a number or ±inf (got {x!r})")
    x = float(x)
    if math.isnan(x):
        raise GeosteerError(f"wall {what} is NaN; a range needs numbers lo < hi (±inf allowed)")
    return x


def check_range(r, what: str) -> tuple[float, float]:
    """(lo, hi) with lo < hi (bounds may be ±inf; None means unbounded), else a one-line error."""
    if r is None:
        return (-_INF, _INF)
    if not isinstance(r, (list, tuple)) or len(r) != 2:
        raise GeosteerError(f"wall {what}-range must be [lo, hi] (got {r!r})")
    lo, hi = _bound(r[0], f"{what}lo"), _bound(r[1], f"{what}hi")
    if not lo < hi:
        raise GeosteerError(f"wall {what}-range [{lo:g}, {hi:g}] is empty: it needs lo < hi (±inf allowed)")
    return (lo, hi)


def _fmt_bound(x: float) -> str:
    return "inf" if x == _INF else "-inf" if x == -_INF else f"{x:g}"


@dataclass(frozen=True)
class Wall:
    """One wall: a layer, its (head, dim) pairs (``pairs``, or the product ``heads`` × ``dims``, None = all)
    and the closed q/k ranges of the blocked region."""

    layer: int
    heads: tuple[int, ...] | None = None
    dims: tuple[int, ...] | None = None
    pairs: tuple[tuple[int, int], ...] | None = None
    q: tuple[float, float] = (-_INF, _INF)
    k: tuple[float, float] = (-_INF, _INF)

    def resolved_pairs(self, n_heads: int, head_dim: int) -> list[tuple[int, int]]:
        if self.pairs is not None:
            return [tuple(p) for p in self.pairs]
        hs = range(n_heads) if self.heads is None else self.heads
        ds = range(head_dim) if self.dims is None else self.dims
        return [(h, d) for h in hs for d in ds]

    def describe(self) -> str:
        sel = f"layer={self.layer}"
        if self.pairs is not None:
            sel += f" surfaces={len(self.pairs)}"
        if self.heads is not None:
            sel += " head=" + ",".join(map(str, self.heads))
        if self.dims is not None:
            sel += " dim=" + ",".join(map(str, self.dims))
        return (f"wall {sel} q={_fmt_bound(self.q[0])}..{_fmt_bound(self.q[1])} "
                f"k={_fmt_bound(self.k[0])}..{_fmt_bound(self.k[1])}")

    def to_dict(self) -> dict:
        """JSON form; infinite bounds are written as null (strict JSON has no infinity)."""
        def rng(r):
            return [None if math.isinf(x) else x for x in r]

        d: dict = {"layer": self.layer, "q": rng(self.q), "k": rng(self.k)}
        if self.pairs is not None:
            d["pairs"] = [list(p) for p in self.pairs]
        if self.heads is not None:
            d["heads"] = list(self.heads)
        if self.dims is not None:
            d["dims"] = list(self.dims)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Wall:
        if not isinstance(d, dict) or "layer" not in d:
            raise GeosteerError(f"a wall must be an object with a layer (got {d!r})")
        unknown = set(d) - {"layer", "heads", "dims", "pairs", "q", "k"}
        if unknown:
            raise GeosteerError(f"wall has unknown keys {sorted(unknown)}")

        def ints(v, what):
            if v is None:
                return None
            if not isinstance(v, (list, tuple)) or any(isinstance(x, bool) or not isinstance(x, int) for x in v):
                raise GeosteerError(f"wall {what} must be a list of whole numbers (got {v!r})")
            return tuple(v)

        pairs = d.get("pairs")
        if pairs is not None:
            if not isinstance(pairs, (list, tuple)) or not all(isinstance(p, (list, tuple)) and len(p) == 2
                                                                for p in pairs):
                raise GeosteerError(f"wall pairs must be a list of [head, dim] (got {pairs!r})")
            pairs = tuple(ints(p, "pair") for p in pairs)
        layer = d["layer"]
        if isinstance(layer, bool) or not isinstance(layer, int):
            raise GeosteerError(f"wall layer must be a whole number (got {layer!r})")
        return cls(layer=layer, heads=ints(d.get("heads"), "heads"), dims=ints(d.get("dims"), "dims"),
                   pairs=pairs, q=check_range(d.get("q"), "q"), k=check_range(d.get("k"), "k"))


def validate_wall(w: Wall, *, n_layers: int | None, layers: list[int], n_heads: int, head_dim: int) -> Wall:
    """Check a wall against the model shape (one-line errors naming the valid range); returns it."""
    if n_layers is not None:
        if not 0 <= w.layer < n_layers:
            raise GeosteerError(f"wall layer {w.layer} out of range (valid 0–{n_layers - 1})")
    elif w.layer not in layers:
        raise GeosteerError(f"wall layer {w.layer} out of range (valid: {', '.join(map(str, layers))})")
    check_range(list(w.q), "q")
    check_range(list(w.k), "k")
    for h in w.heads or ():
        if not 0 <= h < n_heads:
            raise GeosteerError(f"wall head {h} out of range (valid 0–{n_heads - 1})")
    for dd in w.dims or ():
        if not 0 <= dd < head_dim:
            raise GeosteerError(f"wall dim {dd} out of range (valid 0–{head_dim - 1})")
    for h, dd in w.pairs or ():
        if not 0 <= h < n_heads or not 0 <= dd < head_dim:
            raise GeosteerError(f"wall surface (head {h}, dim {dd}) out of range (heads 0–{n_heads - 1}, "
                                f"dims 0–{head_dim - 1})")
    if w.pairs is not None and (w.heads is not None or w.dims is not None):
        raise GeosteerError("a wall takes either pairs or heads/dims, not both")
    if w.pairs is not None and not w.pairs:
        raise GeosteerError("a wall with an empty list of surfaces blocks nothing")
    return w


@dataclass
class LayerWalls:
    """The walls of one layer compiled for the kernel: unique pairs and per-pair region slots.

    ``heads``/``dims`` (P,) long; ``regions`` (P, R, 4) float64 [qlo, qhi, klo, khi] with unused slots
    set to an empty region (lo = +inf), R = the most walls on one pair.
    """

    heads: torch.Tensor
    dims: torch.Tensor
    regions: torch.Tensor


def compile_layer(walls: list[Wall], n_heads: int, head_dim: int) -> LayerWalls | None:
    per: dict[tuple[int, int], list[tuple[float, float, float, float]]] = {}
    for w in walls:
        for p in w.resolved_pairs(n_heads, head_dim):
            per.setdefault(p, []).append((w.q[0], w.q[1], w.k[0], w.k[1]))
    if not per:
        return None
    pairs = sorted(per)
    R = max(len(v) for v in per.values())
    reg = torch.full((len(pairs), R, 4), _INF, dtype=torch.float64)
    reg[..., 1] = reg[..., 3] = -_INF
    for i, p in enumerate(pairs):
        for r, box in enumerate(per[p]):
            reg[i, r] = torch.tensor(box, dtype=torch.float64)
    return LayerWalls(torch.tensor([p[0] for p in pairs]), torch.tensor([p[1] for p in pairs]), reg)


def blocked_mask(qv: torch.Tensor, kv: torch.Tensor, regions: torch.Tensor) -> torch.Tensor:
    """Bool (b, P, n_q, n_k): pair (i, j) of each walled (head, dim) lies in one of its regions.

    ``qv`` (b, P, n_q), ``kv`` (b, P, n_k), ``regions`` (P, R, 4). Comparisons in float64 so that a bound
    exactly on a float32 value is honoured as written.
    """
    q, k = qv.double(), kv.double()
    out = None
    for r in range(regions.shape[1]):
        box = regions[:, r].to(q.device)
        qin = (q >= box[:, 0, None]) & (q <= box[:, 1, None])
        kin = (k >= box[:, 2, None]) & (k <= box[:, 3, None])
        m = qin.unsqueeze(-1) & kin.unsqueeze(-2)
        out = m if out is None else out | m
    return out


def pair_views(query, key, value, lw: LayerWalls, rep: int):
    """(q (b,P,L), k (b,P,T), v (b,P,T)) of the walled pairs; query head h reads KV head h // rep."""
    hp, dp = lw.heads.to(query.device), lw.dims.to(query.device)
    g = torch.div(hp, rep, rounding_mode="floor")
    qv = query.transpose(-1, -2)[:, hp, dp]
    kv = key.transpose(-1, -2)[:, g, dp]
    vv = value.transpose(-1, -2)[:, g, dp]
    return qv, kv, vv


def walled_output(query, key, value, coeff, grid_size: int, lo, hi, lw: LayerWalls, *, attn_mask=None,
                  is_causal: bool = False, scaling=None, softcap=None, block: int = 128):
    """Output of the walled (head, dim) pairs with walls applied: ``(out (b, L, P), affected (b, L, P))``;
    ``affected`` marks the query rows with a blocked key. ``coeff`` (H, d, K, K) or None (gain 1 outside walls).
    """
    key, value, _, query_g, common = prepare(query, key, value, attn_mask=attn_mask, is_causal=is_causal,
                                             scaling=scaling, softcap=softcap, dropout=0.0)
    b, L, rep = query.shape[0], common["L"], query_g.shape[2]
    P = lw.heads.numel()
    outs, affs = [], []
    for c0 in range(0, P, PAIR_CHUNK):
        c1 = min(P, c0 + PAIR_CHUNK)
        sub = LayerWalls(lw.heads[c0:c1], lw.dims[c0:c1], lw.regions[c0:c1])
        qv, kv, vv = pair_views(query, key, value, sub, rep)
        hp = sub.heads.to(query.device)
        g, r = torch.div(hp, rep, rounding_mode="floor"), hp % rep
        if coeff is not None:
            c = coeff[hp, sub.dims.to(query.device)].to(query.dtype)  # (P, K, K)
            feats = torch.cat([vv.unsqueeze(-1) * bspline_basis(kv, grid_size, lo, hi), vv.unsqueeze(-1)], -1)
            qb = torch.einsum("bplk,pkc->bplc", bspline_basis(qv, grid_size, lo, hi), c)
            qfac = torch.cat([qb, torch.ones_like(qb[..., :1])], -1)
        else:
            feats, qfac = vv.unsqueeze(-1), None
        o_blocks, a_blocks = [], []
        for s0, e0, rng in query_blocks(L, block, common):
            if rng is None:
                o_blocks.append(query.new_zeros(b, c1 - c0, e0 - s0))
                a_blocks.append(torch.zeros(b, c1 - c0, e0 - s0, dtype=torch.bool, device=query.device))
                continue
            k0, k1 = rng
            p = weights_block(query_g, key, s0, e0, k0, k1, **common)[:, g, r]  # (b, P, n_q, n_k)
            blk = blocked_mask(qv[:, :, s0:e0], kv[:, :, k0:k1], sub.regions)
            p = p.masked_fill(blk, 0.0)
            o = torch.matmul(p, feats[:, :, k0:k1])  # (b, P, n_q, K+1 | 1)
            o_blocks.append((o * qfac[:, :, s0:e0]).sum(-1) if qfac is not None else o[..., 0])
            a_blocks.append(blk.any(-1))
        outs.append(torch.cat(o_blocks, -1))
        affs.append(torch.cat(a_blocks, -1))
    return torch.cat(outs, 1).transpose(1, 2), torch.cat(affs, 1).transpose(1, 2)


def apply_walls(out: torch.Tensor, walled: torch.Tensor, affected: torch.Tensor, lw: LayerWalls) -> torch.Tensor:
    """``out`` (b, L, H, d) with the affected queries of the walled pairs replaced by ``walled`` (b, L, P)."""
    hp, dp = lw.heads.to(out.device), lw.dims.to(out.device)
    cur = out[:, :, hp, dp]
    out = out.clone() if out.requires_grad or torch.is_grad_enabled() else out
    out[:, :, hp, dp] = torch.where(affected, walled.to(out.dtype), cur)
    return out


def bank_walled_output(bank, call, out: torch.Tensor, slot: int | None, lw: LayerWalls) -> torch.Tensor:
    """``out`` (the unwalled output of one attention call of ``bank``) with the layer's walls applied.
    ``slot`` None: a layer without surfaces (gain 1 outside the walls). bf16/fp16 run in fp32."""
    q = call.query
    kw = call.kwargs
    is_causal = kw.get("is_causal")
    if is_causal is None:
        is_causal = getattr(call.module, "is_causal", True)
    if slot is None:
        coeff, lo, hi = None, 0.0, 1.0
    else:
        coeff = bank._layer_coeff(slot, torch.is_grad_enabled() and bank.coefficients.requires_grad)
        coeff = coeff.to(q.device) if coeff.device != q.device else coeff
        lo, hi = float(bank.lo[slot]), float(bank.hi[slot])
    half = q.dtype in (torch.float16, torch.bfloat16)
    cast = (lambda t: t.float()) if half else (lambda t: t)
    mask = call.attention_mask
    if half and mask is not None and mask.dtype != torch.bool:
        mask = mask.float()
    wo, aff = walled_output(cast(q), cast(call.key), cast(call.value), coeff, bank.grid_size, lo, hi, lw,
                            attn_mask=mask, is_causal=bool(is_causal), scaling=call.scaling,
                            softcap=kw.get("softcap"), block=bank.block)
    return apply_walls(out, wo, aff, lw)
