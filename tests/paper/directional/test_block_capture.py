"""The cached block capture (``capture_blocks``: block 0's inputs kept once, each block run on its kept inputs)
against a forward up to each block (``capture_block``), and AWQ's scales and GPTQ's weights through either
path (tiny models only)."""

import copy

import pytest
import torch

from geosteer.models.anatomy import anatomy
from geosteer_paper.directional.awq import awq_model
from geosteer_paper.directional.block_capture import capture_block, capture_blocks
from geosteer_paper.directional.gptq import gptq_model

FAMILIES = ["llama", "qwen2", "gemma3"]  # the ladder's families; qwen2 and gemma3 mix sliding and full layers


def _batches(seed: int = 3, n: int = 3, t: int = 12) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(5, 900, (1, t), generator=g) for _ in range(n)]


def _same_calls(a, b) -> bool:
    """Two lists of captured (args, kwargs) calls hold equal tensors and equal other values."""
    if len(a) != len(b):
        return False
    for (args_a, kw_a), (args_b, kw_b) in zip(a, b, strict=True):
        flat_a = list(args_a) + [kw_a[k] for k in sorted(kw_a)]
        flat_b = list(args_b) + [kw_b[k] for k in sorted(kw_b)]
        if sorted(kw_a) != sorted(kw_b) or len(flat_a) != len(flat_b):
            return False
        for x, y in zip(flat_a, flat_b, strict=True):
            if isinstance(x, tuple):
                if not all(torch.equal(u, v) for u, v in zip(x, y, strict=True)):
                    return False
            elif torch.is_tensor(x):
                if not torch.equal(x, y):
                    return False
            elif x != y:
                return False
    return True


@pytest.mark.parametrize("family", FAMILIES)
def test_cached_capture_equals_a_forward_up_to_each_block(family, tiny_model):
    m, _ = tiny_model(family)
    ids = _batches()
    seen = []
    for layer, cap in capture_blocks(m, ids):
        ref = capture_block(m, layer, ids)
        assert sorted(cap.inputs) == sorted(ref.inputs)
        for name in ref.inputs:
            assert all(torch.equal(x, y) for x, y in zip(cap.inputs[name], ref.inputs[name], strict=True)), name
        assert _same_calls(cap.attn_calls, ref.attn_calls)
        assert _same_calls(cap.mlp_calls, ref.mlp_calls)
        seen.append(layer)
    assert seen == list(range(anatomy(m).n_layers))


@pytest.mark.parametrize("family", FAMILIES)
def test_awq_scales_and_weights_are_the_same_through_the_cached_capture(family, tiny_model):
    m, _ = tiny_model(family)
    ids = _batches(seed=5)
    cached, plain = copy.deepcopy(m), copy.deepcopy(m)
    alphas_cached = awq_model(m, cached, ids, bits=3, group=32, cached=True)
    alphas_plain = awq_model(m, plain, ids, bits=3, group=32, cached=False)
    assert alphas_cached == alphas_plain
    assert len(set(alphas_plain)) > 1  # the search picks different scales in different places
    changed = 0
    for (name, p), q, p0 in zip(cached.named_parameters(), plain.parameters(), m.parameters(), strict=True):
        assert torch.equal(p, q), name
        changed += not torch.equal(p, p0)
    assert changed >= 7 * anatomy(m).n_layers  # every linear of every block was quantised


def test_gptq_feeds_each_quantised_block_up_through_the_cached_capture(tiny_model):
    m, _ = tiny_model("llama")
    ids = _batches(seed=7)
    cached, plain = copy.deepcopy(m), copy.deepcopy(m)
    gptq_model(cached, ids, bits=3, group=32, cached=True)
    gptq_model(plain, ids, bits=3, group=32, cached=False)
    for (name, p), q in zip(cached.named_parameters(), plain.parameters(), strict=True):
        assert torch.equal(p, q), name
    # block 1's inputs differ between the stock and the quantised block 0, so the order matters
    stock_in = capture_block(m, 1, ids).inputs["self_attn.q_proj"][0]
    quant_in = capture_block(cached, 1, ids).inputs["self_attn.q_proj"][0]
    assert not torch.equal(stock_in, quant_in)
