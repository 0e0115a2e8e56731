"""``hooks.attach_hooks`` and ``attention.attach_handlers``: the one registration loop (issue 12)."""

from __future__ import annotations

import pytest
import torch

import geosteer
from geosteer.attention import attach_handlers, attention_handlers
from geosteer.hooks import attach_hooks
from geosteer.models.anatomy import anatomy


@pytest.fixture(scope="module")
def model():
    m, _ = geosteer.load_model("tiny-llama")
    return m


def _logits(m):
    with torch.no_grad():
        return m(input_ids=torch.arange(1, 9)[None]).logits


def _n_hooks(m) -> int:
    return sum(len(mod._forward_hooks) + len(mod._forward_pre_hooks) for mod in m.modules())


def test_attach_hooks_matches_plain_hooks_and_removes_everything(model):
    base, n0 = _logits(model), _n_hooks(model)
    seen = []

    def fn(x, ctx):
        seen.append(ctx.layer)
        return x * 0.5

    remove = attach_hooks(model, "attn_out", [2, 0], fn)
    edited = _logits(model)
    remove()
    assert seen == [0, 2]  # the forward order, each chosen layer once
    # independent reference: plain torch hooks on the same modules
    an = anatomy(model)
    hs = [an.blocks[i].attn_update.register_forward_hook(
        lambda mod, a, out: (out[0] * 0.5, *out[1:]) if isinstance(out, tuple) else out * 0.5) for i in (0, 2)]
    ref = _logits(model)
    for h in hs:
        h.remove()
    assert torch.allclose(edited, ref, atol=1e-6) and not torch.allclose(edited, base)
    assert torch.equal(_logits(model), base) and _n_hooks(model) == n0


def test_attach_hooks_refuses_bad_input_and_leaves_nothing(model):
    n0 = _n_hooks(model)
    with pytest.raises(ValueError, match="unknown hook point"):
        attach_hooks(model, "mlp_middle", None, lambda x, ctx: None)
    for bad in ([], [1, 1], [7]):
        with pytest.raises(ValueError):
            attach_hooks(model, "mlp_out", bad, lambda x, ctx: None)
    assert _n_hooks(model) == n0


def test_attach_handlers_removes_in_reverse_and_cleans_up_on_error(model):
    an = anatomy(model)
    counts = lambda: [len(attention_handlers(b.attn)) for b in an.blocks]  # noqa: E731
    before = counts()
    calls = []

    def make(layer):
        if layer == 2:
            raise RuntimeError("boom")
        return lambda call, proceed: (calls.append(layer), proceed(call))[1]

    with pytest.raises(RuntimeError, match="boom"):
        attach_handlers(model, [0, 1, 2], make)
    assert counts() == before  # the handlers of layers 0 and 1 were removed again

    remove = attach_handlers(model, [0, 1], make)
    assert counts() == [c + (i in (0, 1)) for i, c in enumerate(before)]
    base = _logits(model)
    assert calls == [0, 1]
    remove()
    remove()  # a second call is harmless
    assert counts() == before
    assert torch.equal(_logits(model), base)  # a pass-through handler is neutral
