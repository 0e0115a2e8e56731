"""A surfaces bank's served operations (``geosteer.served``): its surfaces and exact walls, layer by layer."""

from __future__ import annotations

from geosteer.served import ServedOps, Surface, Walls


def bank_ops(bank, ops: ServedOps) -> None:
    """Surfaces (zero surfaces: the stock layer, nothing declared) and exact walls, the walls after the
    surfaces of their layer, as the bank applies them."""
    if not bank.enabled:
        return
    for layer in sorted(set(bank.layers) | {w.layer for w in bank.walls}):
        slot = bank.layers.index(layer) if layer in bank.layers else None
        coeff = None
        if slot is not None and bank.layer_nonzero(slot):
            coeff = bank.coefficients[slot].detach().float().clone()
        lo, hi = bank.range_of(layer) if slot is not None else (0.0, 1.0)
        if bank.walls:
            lw = bank.walls_for(layer)
            if lw is not None:
                ops.attention(layer, Walls(lw, coeff, bank.grid_size, lo, hi))
        if coeff is not None:
            ops.attention(layer, Surface(coeff, bank.grid_size, lo, hi))
