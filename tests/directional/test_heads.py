"""Head selector and concatenated value space of ComponentScale (paper Fig. 7; block-diagonal vs concat)."""

import pytest
import torch

from geosteer.attention import attention_weights, repeat_kv, stock_attention
from geosteer.directional.sites import ComponentScale
from geosteer.errors import GeosteerError
from geosteer.interventions import steer
from geosteer.models.anatomy import anatomy
from geosteer_paper.reproduction.references import capture_call
from tests.directional.helpers import padded_inputs


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2", "tiny-gemma3", "tiny-gpt2"])
def test_neutral_with_heads_and_concat_reproduces_stock_logits(tiny_model, name):
    m, _ = tiny_model(name)
    ids, mask = padded_inputs(2, 14, seed=3, pad=4)
    base = m(input_ids=ids, attention_mask=mask).logits
    for site in ("value_full", "value_exclude_self"):
        with steer(m, ComponentScale(site, 1.0, 1.0, heads=[0, anatomy(m).n_heads - 1])):
            assert torch.equal(m(input_ids=ids, attention_mask=mask).logits, base), site
        with steer(m, ComponentScale(site, 1.0, 1.0, value_space="concat")):
            assert torch.equal(m(input_ids=ids, attention_mask=mask).logits, base), site


def _naive(call, site, sp, sq, heads=None, concat=False):
    """Per-head loop on the materialised weights; concat = one projection over all heads' vectors."""
    w = attention_weights(call).double()
    v = repeat_kv(call.value, call.n_rep).double()
    b, h, q, k = w.shape
    off = k - q
    out = torch.einsum("bhqk,bhkd->bhqd", w, v)
    ys, vts = torch.zeros_like(out), torch.zeros_like(out)
    for i in range(b):
        for hh in range(h):
            for t in range(q):
                vt = v[i, hh, t + off]
                y = out[i, hh, t].clone()
                if site == "value_exclude_self":
                    y = y - w[i, hh, t, t + off] * vt
                ys[i, hh, t], vts[i, hh, t] = y, vt
    new = out.clone()
    for i in range(b):
        for t in range(q):
            if concat:
                y, vt = ys[i, :, t].reshape(-1), vts[i, :, t].reshape(-1)
                par = (y @ vt) / (vt @ vt) * vt
                new[i, :, t] += ((sp - 1) * par + (sq - 1) * (y - par)).reshape(h, -1)
                continue
            for hh in range(h):
                if heads is not None and hh not in heads:
                    continue
                y, vt = ys[i, hh, t], vts[i, hh, t]
                par = (y @ vt) / (vt @ vt) * vt
                new[i, hh, t] += (sp - 1) * par + (sq - 1) * (y - par)
    return new.permute(0, 2, 1, 3)  # (b, q, H, dv)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-mistral", "tiny-gpt_neox"])
@pytest.mark.parametrize("site", ["value_full", "value_exclude_self"])
def test_head_selection_and_concat_match_naive(tiny_model, name, site):
    m, _ = tiny_model(name)
    ids, mask = padded_inputs(2, 14, seed=3, pad=4)
    call = capture_call(m, 1, ids, mask)
    valid = mask.bool()
    n_heads = anatomy(m).n_heads
    stock, _ = stock_attention(call)
    for heads in ([1], [0, n_heads - 1]):
        out, _ = ComponentScale(site, 0.0, 1.3, heads=heads)._value_handler()(call, stock_attention)
        ref = _naive(call, site, 0.0, 1.3, heads=heads)
        assert (out.double() - ref)[valid].abs().max() < 2e-5
        others = [h for h in range(n_heads) if h not in heads]
        assert torch.equal(out[:, :, others], stock[:, :, others])  # untouched heads bit-identical
    out, _ = ComponentScale(site, 0.0, 1.3, value_space="concat")._value_handler()(call, stock_attention)
    ref = _naive(call, site, 0.0, 1.3, concat=True)
    assert (out.double() - ref)[valid].abs().max() < 2e-5
    per_head, _ = ComponentScale(site, 0.0, 1.3)._value_handler()(call, stock_attention)
    assert (per_head - out)[valid].abs().max() > 1e-4  # the two spaces are different edits


def test_diag_removal_with_heads(tiny_model):
    m, _ = tiny_model("tiny-llama")
    ids, mask = padded_inputs(2, 14, seed=3, pad=4)
    call = capture_call(m, 0, ids, mask)
    stock, _ = stock_attention(call)
    full, _ = ComponentScale("diag_removal")._value_handler()(call, stock_attention)
    one, _ = ComponentScale("diag_removal", heads=[2])._value_handler()(call, stock_attention)
    valid = mask.bool()
    assert torch.allclose(one[:, :, 2][valid], full[:, :, 2][valid], atol=1e-6)
    assert torch.allclose(one[:, :, [0, 1, 3]][valid], stock[:, :, [0, 1, 3]][valid], atol=1e-6)
    assert (one[:, :, 2] - stock[:, :, 2])[valid].abs().max() > 1e-4


def test_joint_heads_equal_all_heads(tiny_model):
    m, _ = tiny_model("tiny-qwen2")
    ids, mask = padded_inputs(2, 14, seed=3, pad=4)
    n = anatomy(m).n_heads
    with steer(m, ComponentScale("value_exclude_self", 0.0, layers=[1])):
        a = m(input_ids=ids, attention_mask=mask).logits
    with steer(m, ComponentScale("value_exclude_self", 0.0, layers=[1], heads=list(range(n)))):
        b = m(input_ids=ids, attention_mask=mask).logits
    assert torch.allclose(a, b, atol=1e-6)


def test_bad_head_selection_errors(tiny_model):
    m, _ = tiny_model("tiny-llama")
    n = anatomy(m).n_heads
    with pytest.raises(GeosteerError, match=f"head {n} out of range"):
        with steer(m, ComponentScale("value_full", 0.0, heads=[n])):
            pass
    with pytest.raises(GeosteerError, match="value site"):
        ComponentScale("attn_out", 0.0, heads=[0])
    with pytest.raises(GeosteerError, match="concat"):
        ComponentScale("value_full", 0.0, heads=[0], value_space="concat")
    with pytest.raises(GeosteerError, match="unknown value space"):
        ComponentScale("value_full", 0.0, value_space="flat")
    with pytest.raises(GeosteerError, match="bad head spec"):
        ComponentScale("value_full", 0.0, heads="x")
