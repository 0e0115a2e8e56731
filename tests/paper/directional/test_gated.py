"""The gated control s∥ = σ(wᵀx) (paper App. E, Fig. 8) against independent computations."""

import pytest
import torch

from geosteer.attention import add_attention_handler, attention_weights, repeat_kv, stock_attention
from geosteer.directional.sites import ComponentScale
from geosteer.errors import GeosteerError
from geosteer.interventions import steer
from geosteer.models.anatomy import anatomy
from geosteer_paper.directional.gated import GatedParallelScale
from tests.conftest import random_ids


def _naive_gated(call, site, s, per_head):
    """Per-head, per-token loop on the materialised weights with s∥ = s[i, t, h|0], s⊥ = 1."""
    W = attention_weights(call)  # (b, H, q, k)
    v = repeat_kv(call.value, call.n_rep)
    b, H, q, k = W.shape
    off = k - q
    out = torch.zeros(b, H, q, v.shape[-1], dtype=torch.float64)
    for i in range(b):
        for h in range(H):
            for t in range(q):
                w, vt, vv = W[i, h, t].double(), v[i, h, t + off].double(), v[i, h].double()
                y = w @ vv
                d = w[t + off] * vt if site == "value_exclude_self" else torch.zeros_like(vt)
                c = y - d
                par = (c @ vt) / (vt @ vt) * vt
                out[i, h, t] = d + float(s[i, t, h if per_head else 0]) * par + (c - par)
    return out


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gpt2"])
@pytest.mark.parametrize("site", ["value_full", "value_exclude_self", "attn_out"])
def test_zero_weights_equal_fixed_half_scale(tiny_model, name, site):
    m, _ = tiny_model(name)
    ids = random_ids(2, 12, seed=0)
    gate = GatedParallelScale(m, site)  # w = 0 -> s_par = 0.5 everywhere
    with steer(m, gate):
        got = m(input_ids=ids).logits
    with steer(m, ComponentScale(site, s_par=0.5)):
        ref = m(input_ids=ids).logits
    assert torch.allclose(got, ref, atol=1e-5)
    assert all(torch.allclose(s, torch.full_like(s, 0.5)) for s in gate.last_gates.values())


def _random_gate(m, site, per_head=False, gate_input="normed", seed=3):
    gate = GatedParallelScale(m, site, gate_input=gate_input, per_head=per_head)
    with torch.no_grad():
        gate.weight.copy_(torch.randn(gate.weight.shape, generator=torch.Generator().manual_seed(seed)) * 0.5)
    return gate


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-mistral", "tiny-gemma3"])
@pytest.mark.parametrize("site", ["value_full", "value_exclude_self"])
@pytest.mark.parametrize("per_head", [False, True])
def test_value_gate_matches_naive_per_token_loop(tiny_model, name, site, per_head):
    m, _ = tiny_model(name)
    an = anatomy(m)
    layer = 1
    ids = random_ids(2, 12, seed=0)
    gate = _random_gate(m, site, per_head)
    seen = {}
    xs = []
    h_norm = an.blocks[layer].attn_norm.register_forward_hook(lambda mod, a, out: xs.append(out.detach()))

    def grab(call, proceed):  # runs before the gate's handler: sees the stock call
        seen["call"] = call
        out, w = proceed(call)
        seen["out"] = out
        return out, w

    with steer(m, gate):
        rm = add_attention_handler(an.blocks[layer].attn, grab)  # after the gate in the chain
        try:
            m(input_ids=ids)
        finally:
            rm()
    h_norm.remove()
    call, x = seen["call"], xs[0].double()
    w = gate.weight[gate.layers.index(layer)].detach().double()  # (1|H, d)
    s = torch.sigmoid(x @ w.T)  # (b, q, 1|H)
    ref = _naive_gated(call, site, s, per_head)
    gate._x[layer] = xs[0]  # what the attached gate captured during that forward
    out, _ = gate._value_handler(layer)(call, stock_attention)
    assert torch.allclose(out.permute(0, 2, 1, 3).double(), ref, atol=2e-5)


def test_residual_gate_matches_plain_hooks(tiny_model):
    m, _ = tiny_model("tiny-llama")
    an = anatomy(m)
    ids = random_ids(2, 12, seed=0)
    gate = _random_gate(m, "attn_out", gate_input="resid", seed=5)
    with steer(m, gate):
        got = m(input_ids=ids).logits
    handles, state = [], {}
    for layer, blk in enumerate(an.blocks):
        w = gate.weight[layer, 0].detach()

        def pre(mod, args, kwargs):
            state["x"] = (args[0] if args else kwargs["hidden_states"])

        def post(mod, args, out, w=w):
            a, x = out[0], state["x"]
            s = torch.sigmoid(x @ w)[..., None]
            alpha = (a * x).sum(-1, keepdim=True) / (x * x).sum(-1, keepdim=True)
            return (a - (1 - s) * alpha * x, *out[1:])

        handles.append(blk.layer.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(blk.attn.register_forward_hook(post))
    try:
        ref = m(input_ids=ids).logits
    finally:
        for h in handles:
            h.remove()
    assert torch.allclose(got, ref, atol=1e-5)
    assert (got - m(input_ids=ids).logits).abs().max() > 1e-3  # the gate does something


def test_gate_weights_get_gradients_and_detach_cleanly(tiny_model):
    m, _ = tiny_model("tiny-qwen2")
    ids = random_ids(2, 12, seed=0)
    base = m(input_ids=ids).logits
    gate = _random_gate(m, "value_full")
    with steer(m, gate):
        m(input_ids=ids).logits.logsumexp(-1).mean().backward()
    assert gate.weight.grad is not None and gate.weight.grad.abs().sum() > 0
    assert torch.equal(m(input_ids=ids).logits, base)


def test_bad_input(tiny_model):
    m, _ = tiny_model("tiny-llama")
    with pytest.raises(GeosteerError):
        GatedParallelScale(m, "mlp_out")
    with pytest.raises(GeosteerError):
        GatedParallelScale(m, "value_full", gate_input="query")
    with pytest.raises(GeosteerError):
        GatedParallelScale(m, "attn_out", per_head=True)
    with pytest.raises(GeosteerError):
        GatedParallelScale(m, "value_full", layers=[99])
