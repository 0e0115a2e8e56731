"""The FLOP floor beside the benchmark ratios (benchmarks/manifold_speed.py): its stock count against
PyTorch's own FLOP counter, and its growth with length."""

import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import manifold_speed  # noqa: E402


@pytest.mark.parametrize("family", ["llama", "gemma3"])  # gemma3: head_dim 32 ≠ d/h
def test_flop_floor_stock_count_matches_pytorch_flop_counter(tiny_model, family):
    model, _ = tiny_model(family)
    K = 11
    # one token: one visible pair per head and layer. The counter sees the linear layers (aten.mm); the
    # fused CPU attention kernel is not in its table, so its 2·d per pair and head is added here.
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        model(torch.tensor([[5]]), use_cache=False)
    counted = fc.get_flop_counts()["Global"]
    assert set(counted) == {torch.ops.aten.mm}
    from geosteer.models.anatomy import anatomy

    an = anatomy(model)
    per_pair = an.n_layers * an.n_heads * an.head_dim
    stock_macs = fc.get_total_flops() / 2 + 2 * per_pair
    extra = per_pair * K  # d·K per pair per head and layer
    assert manifold_speed.flop_floor(model, 1, K) == pytest.approx((stock_macs + extra) / stock_macs, rel=1e-9)


def test_flop_floor_grows_with_visible_keys(tiny_model):
    model, _ = tiny_model("llama")
    f = [manifold_speed.flop_floor(model, n, 11) for n in (64, 128, 256)]
    assert 1.0 < f[0] < f[1] < f[2]
    assert manifold_speed.flop_floor(model, 256, 2) < f[2]  # rank 2: narrower A·F
    # decoding one token against a cache of 255 sees as many keys as the last of 256 causal queries
    assert manifold_speed.flop_floor(model, 1, 11, cache=255) > manifold_speed.flop_floor(model, 1, 11)
