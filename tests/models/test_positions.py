"""The learned-position guard (geosteer.models.positions): neutral inside the limit, one line past it."""

from __future__ import annotations

import pytest
import torch

from geosteer.models.positions import guard_positions


def test_the_guard_is_the_stock_model_below_the_limit_and_refuses_past_it():
    """The guard changes nothing inside the limit (same logits as the unguarded model) and refuses past it
    in one line, including positions reached by decoding with a cache."""
    from geosteer.errors import GeosteerError
    from geosteer.models.tiny import tiny_model

    bare, _ = tiny_model("gpt2")
    guarded, _ = tiny_model("gpt2")
    bare.eval(), guarded.eval()
    assert guard_positions(guarded) == 1 and guard_positions(guarded) == 1  # idempotent
    ids = torch.randint(0, 1000, (2, 512))
    with torch.no_grad():
        assert torch.equal(bare(ids).logits, guarded(ids).logits)
        with pytest.raises(GeosteerError, match="needs 513 positions.*512 learned positions") as e:
            guarded(torch.randint(0, 1000, (1, 513)))
        assert "\n" not in str(e.value)
        past = guarded(ids[:1, :512], use_cache=True).past_key_values
        with pytest.raises(GeosteerError, match="needs 513 positions"):
            guarded(ids[:1, :1], past_key_values=past)
    rotary, _ = tiny_model("llama")
    assert guard_positions(rotary) == 0
