"""A recipe's attention operations split across tensor-parallel ranks, as vLLM splits attention by heads.

Rank r keeps the surfaces and ``value_full`` heads of its query heads; ``value_full`` over concatenated
heads becomes a :class:`ConcatOverRanks` (its dot products all-reduced); exact walls keep the rank's
walled pairs, padded to the widest rank's channels. Residual operations run unchanged. No vLLM import.
"""

from __future__ import annotations

import dataclasses

from geosteer.errors import GeosteerError
from geosteer.served import LayerOps, Surface, ValueScale
from geosteer_vllm.walls import WallOp, wall_op


@dataclasses.dataclass
class ConcatOverRanks(ValueScale):
    """``value_full`` over concatenated heads on one rank's heads: its dot products are partial sums."""


def shard_layer(ops: LayerOps, rank: int, tp: int, n_heads: int) -> LayerOps:
    """Rank ``rank``'s part of one layer's operations (module docstring)."""
    if n_heads % tp:
        raise GeosteerError(f"{n_heads} attention heads do not split over tensor_parallel_size={tp}")
    per = n_heads // tp
    lo, hi = rank * per, (rank + 1) * per
    attention = []
    for op in ops.attention:
        if isinstance(op, Surface):
            attention.append(dataclasses.replace(op, coeff=op.coeff[lo:hi].clone()))
        elif isinstance(op, ValueScale) and op.concat:  # every head (concat takes no head selection)
            attention.append(ConcatOverRanks(op.s_par, op.s_perp, None, True))
        elif isinstance(op, ValueScale):
            if op.heads is None:
                attention.append(op)
            elif any(lo <= h < hi for h in op.heads):
                attention.append(dataclasses.replace(op, heads=[h - lo for h in op.heads if lo <= h < hi]))
        elif isinstance(op, WallOp):
            attention.append(_walls_part(op, rank, tp, per))
        else:
            raise GeosteerError(f"{type(op).__name__} inside attention cannot be split over tensor-parallel ranks")
    return dataclasses.replace(ops, attention=attention)


def _walls_part(op: WallOp, rank: int, tp: int, per: int) -> WallOp:
    """The walls of rank ``rank``'s heads, as wide as the widest rank's (the same KV-cache layout)."""
    lw, coeff = op.source
    parts = []
    for r in range(tp):
        keep = (lw.heads >= r * per) & (lw.heads < (r + 1) * per)
        sub = dataclasses.replace(lw, heads=lw.heads[keep] - r * per, dims=lw.dims[keep], regions=lw.regions[keep])
        parts.append(wall_op(sub, None if coeff is None else coeff[r * per:(r + 1) * per], op.grid_size, op.lo,
                             op.hi, min(op.rep, per)))
    return dataclasses.replace(parts[rank], width=max(p.width for p in parts))


def shard_plan(plan, rank: int, tp: int, n_heads: int):
    """``plan`` with every layer's attention operations cut to rank ``rank``'s heads."""
    if tp == 1:
        return plan
    layers = {i: shard_layer(o, rank, tp, n_heads) if o.attention else o for i, o in plan.layers.items()}
    return dataclasses.replace(plan, layers=layers)
