"""Component-scaling interventions: neutrality on every family, formulas vs independent references."""

import pytest
import torch

from geosteer.attention import attention_weights
from geosteer.directional.config import SITES
from geosteer.directional.sites import ComponentScale
from geosteer.directional.value import self_weight
from geosteer.errors import GeosteerError
from geosteer.interventions import ScaleHook, steer
from geosteer.models.anatomy import anatomy
from geosteer_paper.reproduction.references import attn_out_scaled_by_plain_hooks, capture_call, value_edit_loop
from tests.conftest import random_ids
from tests.directional.helpers import padded_inputs

FAMILIES = ["tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-mistral", "tiny-gemma3", "tiny-gpt2",
            "tiny-gpt_neox"]


@pytest.mark.parametrize("name", FAMILIES)
def test_neutral_reproduces_stock_logits(tiny_model, name):
    m, _ = tiny_model(name)
    ids, mask = padded_inputs(2, 24, seed=0, pad=4)
    base = m(input_ids=ids, attention_mask=mask).logits
    for site in SITES[:-1]:  # diag_removal is a control with no neutral setting
        with steer(m, ComponentScale(site, 1.0, 1.0)):
            out = m(input_ids=ids, attention_mask=mask).logits
        assert torch.equal(out, base), site
        with steer(m, ComponentScale(site, 0.0, 1.0)):
            edited = m(input_ids=ids, attention_mask=mask).logits
        assert (edited - base).abs().max() > 1e-3, f"{site} removal had no effect"
    assert torch.equal(m(input_ids=ids, attention_mask=mask).logits, base)  # removed cleanly


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-mistral", "tiny-gemma3", "tiny-gpt2"])
@pytest.mark.parametrize("site", ["value_full", "value_exclude_self", "diag_removal"])
def test_value_sites_match_naive_reference(tiny_model, name, site):
    m, _ = tiny_model(name)
    ids, mask = padded_inputs(2, 12, seed=0, pad=3, row=0)
    call = capture_call(m, 1, ids, mask)
    iv = ComponentScale(site, 0.25, 1.75)
    handler = iv._value_handler()
    from geosteer.attention import stock_attention

    out, _ = handler(call, stock_attention)
    ref = value_edit_loop(call, site, 0.25, 1.75)
    valid = mask.bool()  # padded query rows are irrelevant
    got = out.permute(0, 2, 1, 3).double()
    assert torch.allclose(got.permute(0, 2, 1, 3)[valid], ref.permute(0, 2, 1, 3)[valid], atol=2e-5)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2", "tiny-gemma3"])
def test_self_weight_matches_materialised_diagonal(tiny_model, name):
    m, _ = tiny_model(name)
    ids, mask = padded_inputs(2, 20, seed=0, pad=5)
    call = capture_call(m, 1, ids, mask)
    W = attention_weights(call)
    diag = torch.diagonal(W, dim1=-2, dim2=-1)
    a = self_weight(call, block_rows=7)  # several row blocks
    assert torch.allclose(a.reshape(diag.shape), diag, atol=1e-6)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3", "tiny-gpt_neox"])
def test_residual_attn_matches_plain_hooks(tiny_model, name):
    """attn_out edit recomputed with plain torch hooks (module outputs), not the library hook points."""
    m, _ = tiny_model(name)
    ids = random_ids(1, 10, seed=0)
    sp, sq = -0.5, 1.5
    ref = attn_out_scaled_by_plain_hooks(m, 1, ids, sp, sq)
    with steer(m, ComponentScale("attn_out", sp, sq, layers=[1])):
        got = m(input_ids=ids).logits
    assert torch.allclose(got, ref, atol=1e-5)
    assert (got - m(input_ids=ids).logits).abs().max() > 1e-3  # the edit did something


def test_layer_selection_only_touches_those_layers(tiny_model):
    m, _ = tiny_model("tiny-llama")
    ids = random_ids(1, 10, seed=0)
    an = anatomy(m)
    outs = {}

    def grab(mod, args, kwargs):
        outs["x1"] = (args[0] if args else kwargs["hidden_states"]).detach()

    h = an.blocks[1].layer.register_forward_pre_hook(grab, with_kwargs=True)  # layer 0's output
    try:
        m(input_ids=ids)
        base0 = outs["x1"]
        with steer(m, ComponentScale("resid_post", 0.0, 1.0, layers=[2])):
            m(input_ids=ids)
        assert torch.equal(outs["x1"], base0)
        with steer(m, ComponentScale("resid_post", 0.0, 1.0, layers=[0])):
            m(input_ids=ids)
        assert not torch.equal(outs["x1"], base0)
    finally:
        h.remove()


def test_composes_with_other_interventions(tiny_model):
    m, _ = tiny_model("tiny-qwen3")
    ids = random_ids(1, 12, seed=0)
    base = m(input_ids=ids).logits
    with steer(m, ScaleHook("mlp_out", 0.5, layers=[0]), ComponentScale("value_exclude_self", 0.0),
               ComponentScale("attn_out", 1.0, 1.0)):
        both = m(input_ids=ids).logits
    with steer(m, ScaleHook("mlp_out", 0.5, layers=[0]), ComponentScale("value_exclude_self", 0.0)):
        two = m(input_ids=ids).logits
    assert torch.equal(both, two) and not torch.allclose(both, base)
    assert torch.equal(m(input_ids=ids).logits, base)


def test_bad_input_errors(tiny_model):
    m, _ = tiny_model("tiny-llama")
    with pytest.raises(GeosteerError, match="unknown site 'value'; valid: attn_out, mlp_out"):
        ComponentScale("value")
    with pytest.raises(GeosteerError, match="s_par must be finite"):
        ComponentScale("attn_out", s_par=float("nan"))
    with pytest.raises(ValueError, match="layer 7 out of range: this model has layers 0..2"):
        with steer(m, ComponentScale("value_full", 0.0, layers=[7])):
            pass
    ids = random_ids(1, 5, seed=0)
    assert torch.isfinite(m(input_ids=ids).logits).all()


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gpt2", "tiny-gemma3"])
@pytest.mark.parametrize("site", ["value_exclude_self", "value_full", "diag_removal", "attn_out"])
def test_cached_decoding_equals_the_full_forward_under_an_edit(tiny_model, name, site):
    """Prefill 12 tokens, then 4 cached decode steps under the edit = the same 16 tokens in one forward
    (the value sites see only the cached keys/values and A_tt of the new query; generation relies on it)."""
    m, _ = tiny_model(name)
    ids = random_ids(1, 16, seed=3)
    base = m(input_ids=ids).logits[0, -1]
    with steer(m, ComponentScale(site, 0.0)):
        full = m(input_ids=ids).logits[0, -1]
        out = m(input_ids=ids[:, :12], use_cache=True)
        for t in range(12, 16):
            out = m(input_ids=ids[:, t:t + 1], cache=out.past_key_values, use_cache=True)
        cached = out.logits[0, -1]
    assert (full - base).abs().max() > 1e-3  # the edit does something
    torch.testing.assert_close(cached, full, rtol=1e-4, atol=1e-4)
