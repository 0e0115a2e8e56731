"""A recipe's attention operations split across tensor-parallel ranks, as vLLM splits attention by heads.

With ``tensor_parallel_size`` = tp, rank r runs query heads [r·H/tp, (r+1)·H/tp) of every layer (and the KV
heads they read); the hidden state between layers is whole on every rank, so residual-space operations
(steering vectors, residual scaling, FFN edits) run unchanged. Per rank: the surfaces keep the coefficients
of its heads, ``value_full`` per-head scaling keeps its head selection renumbered to the rank's heads (and
is dropped where it selects none). ``value_full`` over the concatenated heads (one projection over all heads)
and exact walls (a slot table over (head, dim) pairs) are served with one rank only. Nothing here imports vLLM.
"""

from __future__ import annotations

import dataclasses

from geosteer.errors import GeosteerError
from geosteer.served import LayerOps, Surface, ValueScale


def check(name: str, plan, tp: int) -> None:
    """Refuse, in one line, what cannot be split over ``tp`` ranks."""
    if tp == 1:
        return
    for layer in plan.attention_layers:
        for op in plan.layers[layer].attention:
            if isinstance(op, ValueScale) and op.concat:
                raise GeosteerError(f"recipe '{name}': scale_site=value_full over concatenated heads is served with "
                                    f"tensor_parallel_size=1 only (got {tp}); use value_space=head")
            if not isinstance(op, (Surface, ValueScale)):
                raise GeosteerError(f"recipe '{name}': exact walls are served with tensor_parallel_size=1 only "
                                    f"(got {tp})")


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
        elif isinstance(op, ValueScale) and not op.concat:
            if op.heads is None:
                attention.append(op)
            elif any(lo <= h < hi for h in op.heads):
                attention.append(dataclasses.replace(op, heads=[h - lo for h in op.heads if lo <= h < hi]))
        else:
            raise GeosteerError("exact walls and value_full over concatenated heads are served with "
                                "tensor_parallel_size=1 only")
    return dataclasses.replace(ops, attention=attention)


def shard_plan(plan, rank: int, tp: int, n_heads: int):
    """``plan`` with every layer's attention operations cut to rank ``rank``'s heads."""
    if tp == 1:
        return plan
    layers = {i: shard_layer(o, rank, tp, n_heads) if o.attention else o for i, o in plan.layers.items()}
    return dataclasses.replace(plan, layers=layers)
