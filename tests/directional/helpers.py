"""Shared pieces of the directional tests: padded inputs."""

from __future__ import annotations

import torch

from tests.conftest import random_ids


def padded_inputs(b: int, t: int, seed: int, pad: int, row: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, attention mask) of ``b`` random rows of ``t`` tokens, row ``row`` left-padded by ``pad`` tokens."""
    ids = random_ids(b, t, seed)
    mask = torch.ones_like(ids)
    mask[row, :pad] = 0
    return ids, mask
