"""Fixtures of the training-loop tests: tiny-llama's shape with a 512-token vocabulary and a learnable stream."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module")
def tiny():
    """tiny-llama's shape with a 512-token vocabulary (the loop never needs the real vocabulary here)."""
    from transformers import AutoModelForCausalLM

    from geosteer.attention import use_geosteer_attention
    from geosteer.models.loading import smollm2_tokenizer
    from geosteer.models.tiny import tiny_config

    tok = smollm2_tokenizer()
    cfg = tiny_config("llama", vocab_size=512)
    cfg.bos_token_id = tok.bos_token_id
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg).eval().requires_grad_(False)
    use_geosteer_attention(model)
    return model, tok


@pytest.fixture(scope="module")
def stream():
    """A learnable token stream: a short repeating pattern with 20% noise tokens."""
    g = torch.Generator().manual_seed(1)
    base = torch.arange(100, 124).repeat(40)
    noise = torch.randint(200, 300, (base.numel(),), generator=g)
    return torch.where(torch.rand(base.numel(), generator=g) < 0.2, noise, base)
