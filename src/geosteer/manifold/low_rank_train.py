"""Training rank-r surfaces directly: C_d = U_d W_dᵀ with U_d, W_d of shape (K, r).

A ``parametrize`` parametrisation of the bank's ``coefficients`` (kernels see K×K, the optimiser sees U, W).
U starts at 0 and W at Gaussian entries of variance 1/K (as LoRA), so a fresh bank is stock;
:func:`merge_factors` writes the product back before saving.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils import parametrize

from geosteer.errors import GeosteerError


def check_rank(rank: int | None, grid_size: int) -> None:
    """A training rank is an integer 1 ≤ r < K (K = grid + 3; r = K is the full bank: leave it unset)."""
    K = grid_size + 3
    if rank is not None and (isinstance(rank, bool) or int(rank) != rank or not 1 <= rank < K):
        raise GeosteerError(f"--rank must be an integer from 1 to {K - 1} for grid {grid_size} (K = {K}); "
                            f"leave it out for full-rank surfaces (got {rank})")


class Factors(nn.Module):
    """C = U Wᵀ over the last two dims (the parametrisation; ``right_inverse`` sets the starting factors)."""

    def __init__(self, rank: int, seed: int) -> None:
        super().__init__()
        self.rank = int(rank)
        self.seed = int(seed)

    def forward(self, u: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return u @ w.transpose(-1, -2)

    def right_inverse(self, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(U, W) for coefficients ``c``: zero c gives U = 0 and seeded W; otherwise the truncated SVD."""
        shape = (*c.shape[:-1], self.rank)
        if not bool(c.detach().ne(0).any()):
            g = torch.Generator().manual_seed(self.seed)
            w = torch.randn(shape, generator=g, dtype=torch.float64) / c.shape[-1] ** 0.5
            return torch.zeros(shape, dtype=c.dtype, device=c.device), w.to(c.dtype).to(c.device)
        u, s, vh = torch.linalg.svd(c.detach().double())
        root = s[..., : self.rank].sqrt()
        return ((u[..., : self.rank] * root[..., None, :]).to(c.dtype),
                (vh[..., : self.rank, :].transpose(-1, -2) * root[..., None, :]).to(c.dtype))


def factorise(bank: nn.Module, rank: int, seed: int = 0) -> nn.Module:
    """Make ``bank.coefficients`` the product of trainable rank-``rank`` factors (in place; returns the bank)."""
    check_rank(rank, bank.grid_size)
    parametrize.register_parametrization(bank, "coefficients", Factors(rank, seed))
    for p in _factors(bank):
        p.requires_grad_(True)
    return bank


def _factors(bank: nn.Module) -> tuple[nn.Parameter, nn.Parameter]:
    plist = bank.parametrizations.coefficients
    return plist.original0, plist.original1


def is_factorised(bank: nn.Module) -> bool:
    return parametrize.is_parametrized(bank, "coefficients")


def merge_factors(bank: nn.Module) -> nn.Module:
    """Replace the factors by their product as plain, frozen coefficients (no-op on a plain bank)."""
    if is_factorised(bank):
        parametrize.remove_parametrizations(bank, "coefficients", leave_parametrized=True)
    bank.coefficients.requires_grad_(False)
    return bank


def trained_parameters(bank: nn.Module) -> int:
    """Numbers the optimiser updates: 2·r·K per surface when factorised, K² otherwise."""
    if is_factorised(bank):
        return sum(p.numel() for p in _factors(bank))
    return bank.coefficients.numel()
