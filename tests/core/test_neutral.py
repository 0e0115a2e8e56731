"""Neutral settings reproduce the stock model on every tiny family."""

import pytest
import torch

from geosteer.attention import ATTN_NAME, add_attention_handler
from geosteer.interventions import Identity, ScaleHook, steer
from geosteer.models.anatomy import anatomy
from tests.conftest import TINY_FAMILIES, sample_ids


def _stock_logits(model, ids):
    model.set_attn_implementation("sdpa")
    try:
        return model(ids).logits
    finally:
        model.set_attn_implementation(ATTN_NAME)


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_registered_attention_is_bit_identical(tiny_model, family):
    model, tok = tiny_model(family)
    ids = sample_ids(tok)
    assert model.config._attn_implementation == ATTN_NAME
    calls = []
    an = anatomy(model)
    # prove our function is the one being called: a pass-through handler counts calls
    removers = [add_attention_handler(b.attn, lambda c, proceed: (calls.append(1), proceed(c))[1])
                for b in an.blocks]
    with torch.no_grad():
        ours = model(ids).logits
    for r in removers:
        r()
    assert len(calls) == an.n_layers
    with torch.no_grad():
        plain = model(ids).logits
        stock = _stock_logits(model, ids)
    assert torch.equal(plain, stock)
    assert torch.equal(ours, stock)


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_identity_branch_interventions_match(tiny_model, family):
    model, tok = tiny_model(family)
    ids = sample_ids(tok)
    with torch.no_grad():
        ref = model(ids).logits
        points = ("resid_pre", "attn_out", "mlp_in", "mlp_normed", "mlp_out", "resid_post")
        with steer(model, *[Identity(p) for p in points]):
            out = model(ids).logits
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-6)


@pytest.mark.parametrize("family", ["llama", "gpt2", "gpt_neox"])
def test_interventions_removed_on_exit_and_on_error(tiny_model, family):
    model, tok = tiny_model(family)
    ids = sample_ids(tok)
    with torch.no_grad():
        ref = model(ids).logits
        with steer(model, ScaleHook("attn_out", 0.0, layers=[1])):
            changed = model(ids).logits
        assert (changed - ref).abs().max() > 1e-3
        with pytest.raises(RuntimeError, match="boom"):
            with steer(model, ScaleHook("mlp_out", 3.0)):
                raise RuntimeError("boom")
        assert torch.equal(model(ids).logits, ref)
    for b in anatomy(model).blocks:
        for m in (b.layer, b.attn, b.mlp, b.mlp_norm, b.attn_update, b.mlp_update):
            assert not _foreign(m._forward_hooks) and not _foreign(m._forward_pre_hooks)
        assert not getattr(b.attn, "_geosteer_attention_handlers", [])


def _foreign(hooks) -> list:
    """Hooks other than transformers' own output-capturing hooks, which transformers installs once (and keeps)
    the first time a cached model is called with output_hidden_states / output_attentions."""
    return [h for h in hooks.values() if "output_capturing" not in getattr(h, "__qualname__", "")]


def test_interventions_compose_in_order(tiny_model):
    model, tok = tiny_model("llama")
    ids = sample_ids(tok, 1)
    with torch.no_grad():
        with steer(model, ScaleHook("attn_out", 2.0, layers=[0]), ScaleHook("attn_out", 0.25, layers=[0])):
            both = model(ids).logits
        with steer(model, ScaleHook("attn_out", 0.5, layers=[0])):
            single = model(ids).logits
    torch.testing.assert_close(both, single, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family", ["llama", "gemma3", "gpt_neox"])
def test_identity_under_generate_with_kv_cache(tiny_model, family):
    model, tok = tiny_model(family)
    ids = sample_ids(tok, 1)[:, :12]
    kw = dict(max_new_tokens=8, do_sample=False, pad_token_id=tok.pad_token_id, use_cache=True)
    with torch.no_grad():
        ref = model.generate(ids, **kw)
        with steer(model, Identity("attn_out"), Identity("mlp_out")):
            out = model.generate(ids, **kw)
    assert torch.equal(out, ref)


def test_bad_intervention_objects_and_points(tiny_model):
    model, _ = tiny_model("llama")
    with pytest.raises(TypeError, match="not an intervention"):
        with steer(model, object()):
            pass
    with pytest.raises(ValueError, match="valid"):
        with steer(model, ScaleHook("nope", 1.0)):
            pass
