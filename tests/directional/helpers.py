"""Shared pieces of the directional tests: padded inputs and the attention call one forward makes."""

from __future__ import annotations

import torch

from geosteer.attention import AttentionCall, add_attention_handler
from geosteer.models.anatomy import anatomy
from tests.conftest import random_ids


def padded_inputs(b: int, t: int, seed: int, pad: int, row: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, attention mask) of ``b`` random rows of ``t`` tokens, row ``row`` left-padded by ``pad`` tokens."""
    ids = random_ids(b, t, seed)
    mask = torch.ones_like(ids)
    mask[row, :pad] = 0
    return ids, mask


def capture_call(model, layer: int, ids: torch.Tensor, mask: torch.Tensor | None = None) -> AttentionCall:
    """The :class:`AttentionCall` that ``layer``'s attention receives in one stock forward of ``ids``."""
    calls = []
    rm = add_attention_handler(anatomy(model).blocks[layer].attn, lambda c, p: (calls.append(c), p(c))[1])
    try:
        with torch.no_grad():
            model(input_ids=ids, attention_mask=mask)
    finally:
        rm()
    return calls[0]
