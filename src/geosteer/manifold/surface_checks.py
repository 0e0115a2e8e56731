"""Checks and layout facts of a surface bank: finite coefficients and ranges, the device of its layers, how
a layer list is written in messages."""

from __future__ import annotations

import math

import torch

from geosteer.errors import GeosteerError


def check_surfaces(coefficients: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, layers: list[int],
                   source: str = "surfaces") -> None:
    """Refuse non-finite coefficients and grid ranges that are not finite with lo < hi.

    The message names the first offending layer/head/dim (or layer, for a range): a NaN or infinite
    coefficient makes every forward through that layer non-finite, and lo >= hi has no knot spacing.
    """
    for slot, layer in enumerate(layers):
        a, b = float(lo[slot]), float(hi[slot])
        if not (math.isfinite(a) and math.isfinite(b)) or a >= b:
            raise GeosteerError(f"{source}: layer {layer} has grid range [{a}, {b}]; a range needs finite "
                                "lo < hi")
    c = coefficients.detach()
    bad = ~torch.isfinite(c.reshape(*c.shape[:3], -1)).all(-1)
    if bool(bad.any()):
        slot, head, dim = (int(x) for x in torch.nonzero(bad)[0])
        vals = c[slot, head, dim].flatten()
        first = float(vals[~torch.isfinite(vals)][0])
        raise GeosteerError(f"{source}: the surface of layer {layers[slot]} head {head} dim {dim} holds a "
                            f"non-finite coefficient ({first}); surfaces must be finite numbers")


def format_layers(xs) -> str:
    xs = sorted(int(x) for x in xs)
    if not xs:
        return "none"
    if xs == list(range(xs[0], xs[-1] + 1)):
        return f"{xs[0]}–{xs[-1]}" if len(xs) > 1 else str(xs[0])
    return ", ".join(map(str, xs))


def layers_device(an, layers: list[int]) -> torch.device | None:
    """The one device holding the attention weights of ``layers``; None if they are split over devices or
    not materialised (accelerate offload keeps them on ``meta`` until a forward: the hook's device counts)."""
    devs = set()
    for layer in layers:
        attn = an.blocks[layer].attn
        hook = getattr(attn, "_hf_hook", None)
        dev = getattr(hook, "execution_device", None)
        if dev is None:
            p = next(iter(attn.parameters()), None)
            dev = p.device if p is not None else None
        if dev is None or torch.device(dev).type == "meta":
            return None
        devs.add(torch.device(dev if not isinstance(dev, int) else f"cuda:{dev}"))
    return devs.pop() if len(devs) == 1 else None
