"""The integer weight grid shared by the quantisers: asymmetric min/max per group of input columns.

A group of ``group`` consecutive input columns of one output row gets a scale and an integer zero point;
a weight w maps to ``(clamp(round(w / scale) + zero, 0, 2^bits - 1) - zero) * scale``.
"""

from __future__ import annotations

import torch

from geosteer.errors import GeosteerError


def group_params(w: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale and zero point of each row of ``w`` (rows, group): min/max over the last dimension."""
    lo, hi = w.amin(-1, keepdim=True), w.amax(-1, keepdim=True)
    scale = ((hi - lo) / (2 ** bits - 1)).clamp_min(1e-8)
    return scale, torch.round(-lo / scale)


def fake_quant(w: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int) -> torch.Tensor:
    """``w`` rounded onto the grid of (``scale``, ``zero``) and mapped back to floats."""
    return (torch.clamp(torch.round(w / scale) + zero, 0, 2 ** bits - 1) - zero) * scale


def check_group(in_features: int, group: int) -> None:
    """Refuse a group size that does not divide the layer's input width."""
    if group < 1 or in_features % group:
        raise GeosteerError(f"in_features {in_features} is not a multiple of the quantisation group {group}")


def quantize_rtn(w: torch.Tensor, bits: int = 4, group: int = 64) -> torch.Tensor:
    """Round-to-nearest of every weight on its group's min/max grid (no calibration)."""
    out_f, in_f = w.shape
    check_group(in_f, group)
    g = w.reshape(out_f, in_f // group, group)
    scale, zero = group_params(g, bits)
    return fake_quant(g, scale, zero, bits).reshape(out_f, in_f)
