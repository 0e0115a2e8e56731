"""GPTQ (Frantar et al., 2023): column-by-column quantisation with Hessian error feedback.

For a linear with weight W (out, in) and calibration inputs X, GPTQ minimises ‖W X − Ŵ X‖² with
H = 2 X Xᵀ / n: columns are quantised in order, and each column's rounding error, divided by the
diagonal of the upper Cholesky factor U of H⁻¹ (H damped by ``percdamp`` × its mean diagonal), is fed
back into the columns not yet quantised through U's row. Columns go in blocks of ``blocksize`` with the
feedback to later blocks applied once per block (the paper's lazy batch update). Columns that no input
reaches (zero diagonal) are set to zero. Group grids (``quant_grid``) are fixed when the group's first
column is reached, from the weights as updated by then ("on the fly").

``gptq_model`` quantises the blocks of a model in order, each from the inputs that the already
quantised blocks below it produce (as in the reference code; the linears of one block share one pass).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from geosteer_paper.directional.block_capture import block_captures
from geosteer_paper.directional.quant_grid import check_group, fake_quant, group_params


def hessian(x: torch.Tensor) -> torch.Tensor:
    """H = 2 XᵀX / n of input rows ``x`` (n, in)."""
    x = x.reshape(-1, x.shape[-1])
    return 2.0 * x.T @ x / x.shape[0]


def inverse_hessian_factor(h: torch.Tensor, percdamp: float = 0.01) -> tuple[torch.Tensor, torch.Tensor]:
    """(U, dead): U the upper Cholesky factor of the damped H⁻¹; ``dead`` the columns no input reaches."""
    h = h.clone()
    dead = torch.diag(h) == 0
    h[dead, dead] = 1.0
    h += percdamp * torch.mean(torch.diag(h)) * torch.eye(h.shape[0], dtype=h.dtype)
    hinv = torch.cholesky_inverse(torch.linalg.cholesky(h))
    return torch.linalg.cholesky(hinv, upper=True), dead


@torch.no_grad()
def gptq_quantize(w: torch.Tensor, h: torch.Tensor, bits: int = 4, group: int = 64, blocksize: int = 128,
                  percdamp: float = 0.01) -> torch.Tensor:
    """GPTQ of one weight ``w`` (out, in) given the input Hessian ``h`` (in, in); returns the dequantised Ŵ."""
    n_in = w.shape[1]
    check_group(n_in, group)
    blocksize = group * max(1, blocksize // group)  # a group never straddles two blocks
    weight = w.clone()
    u, dead = inverse_hessian_factor(h.to(w.dtype), percdamp)
    weight[:, dead] = 0
    out = torch.zeros_like(weight)
    for i1 in range(0, n_in, blocksize):
        i2 = min(i1 + blocksize, n_in)
        w1, err1, u1 = weight[:, i1:i2].clone(), torch.zeros_like(weight[:, i1:i2]), u[i1:i2, i1:i2]
        for i in range(i2 - i1):
            if i % group == 0:
                scale, zero = group_params(w1[:, i:i + group], bits)
            q = fake_quant(w1[:, i:i + 1], scale, zero, bits)[:, 0]
            out[:, i1 + i] = q
            err = (w1[:, i] - q) / u1[i, i]
            w1[:, i:] -= err[:, None] * u1[i, i:][None]
            err1[:, i] = err
        weight[:, i2:] -= err1 @ u[i1:i2, i2:]
    return out


@torch.no_grad()
def gptq_model(model: nn.Module, batches: Sequence[torch.Tensor], bits: int = 4, group: int = 64,
               percdamp: float = 0.01, cached: bool = True) -> None:
    """Quantise every linear of every block of ``model`` in place, block by block (inputs from the
    quantised blocks below; ``cached``: computed block by block from kept inputs, ``block_captures``)."""
    for _, cap in block_captures(model, batches, cached):
        for name, lin in cap.linears.items():
            w = lin.weight.data.float()
            h = hessian(cap.rows(name))
            lin.weight.data.copy_(gptq_quantize(w, h, bits, group, percdamp=percdamp).to(lin.weight.dtype))
