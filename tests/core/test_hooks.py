"""Hook points agree with plain torch forward hooks written here (independent of geosteer.hooks)."""

import pytest
import torch

from geosteer.interventions import steer
from geosteer.models.anatomy import FAMILIES
from geosteer.record import AttentionRecorder, Recorder
from tests.conftest import TINY_FAMILIES, sample_ids


def _first(o):
    return o[0] if isinstance(o, tuple) else o


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_recorded_points_match_plain_hooks(tiny_model, family):
    model, tok = tiny_model(family)
    ids = sample_ids(tok)
    spec = FAMILIES[model.config.model_type]
    layers = model.get_submodule(spec.layers)
    plain = {}
    handles = []
    for i, layer in enumerate(layers):
        handles.append(layer.register_forward_pre_hook(
            lambda m, a, k, i=i: plain.__setitem__(("x", i), (a[0] if a else k["hidden_states"]).clone()),
            with_kwargs=True))
        handles.append(layer.register_forward_hook(
            lambda m, a, o, i=i: plain.__setitem__(("y", i), _first(o).clone())))
    rec = Recorder(points=("resid_pre", "attn_out", "mlp_out", "resid_post", "mlp_in"))
    with torch.no_grad(), steer(model, rec):
        model(ids)
    for h in handles:
        h.remove()
    parallel = bool(getattr(model.config, "use_parallel_residual", False))
    for i in range(len(layers)):
        x, y = plain["x", i], plain["y", i]
        a, f = rec["attn_out", i][0], rec["mlp_out", i][0]
        torch.testing.assert_close(rec["resid_pre", i][0], x, rtol=0, atol=0)
        torch.testing.assert_close(rec["resid_post", i][0], y, rtol=0, atol=0)
        # the canonical decomposition of the block: y = x + A + Φ
        torch.testing.assert_close(x + a + f, y, rtol=1e-5, atol=1e-5)
        expected_mlp_in = x if parallel else x + a
        torch.testing.assert_close(rec["mlp_in", i][0], expected_mlp_in, rtol=1e-6, atol=1e-6)


def test_attention_recorder_gives_post_rope_qkv(tiny_model):
    model, tok = tiny_model("llama")
    ids = sample_ids(tok, 1)
    rec = AttentionRecorder(layers=[1])
    attn = model.model.layers[1].self_attn
    captured = {}

    def plain_hook(m, a, k):
        captured["x"] = k["hidden_states"]

    h = attn.register_forward_pre_hook(plain_hook, with_kwargs=True)
    with torch.no_grad(), steer(model, rec):
        model(ids)
    h.remove()
    # recompute q, k independently: projection → reshape → RoPE
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    x = captured["x"]
    b, s, _ = x.shape
    hd = attn.head_dim
    q = attn.q_proj(x).view(b, s, -1, hd).transpose(1, 2)
    k = attn.k_proj(x).view(b, s, -1, hd).transpose(1, 2)
    pos = torch.arange(s)[None]
    cos, sin = model.model.rotary_emb(x, pos)
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    torch.testing.assert_close(rec["query", 1][0], q, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rec["key", 1][0], k, rtol=1e-5, atol=1e-5)
    assert rec["value", 1][0].shape == (1, 2, s, hd)


def test_mlp_hook_names_follow_transformerlens(tiny_model):
    """``mlp_in`` is the MLP branch's input before its norm (TransformerLens' hook_mlp_in), ``mlp_normed``
    after it."""
    from geosteer.models.anatomy import anatomy

    model, tok = tiny_model("llama")
    ids = sample_ids(tok, 1)
    block = anatomy(model).blocks[1]
    seen = {}
    hs = [block.mlp_norm.register_forward_pre_hook(lambda m, a: seen.__setitem__("pre", a[0].clone())),
          block.mlp.register_forward_pre_hook(lambda m, a: seen.__setitem__("post", a[0].clone()))]
    rec = Recorder(points=("mlp_in", "mlp_normed"), layers=[1])
    with torch.no_grad(), steer(model, rec):
        model(ids)
    for h in hs:
        h.remove()
    torch.testing.assert_close(rec["mlp_in", 1][0], seen["pre"], rtol=0, atol=0)
    torch.testing.assert_close(rec["mlp_normed", 1][0], seen["post"], rtol=0, atol=0)
    torch.testing.assert_close(block.mlp_norm(seen["pre"]), seen["post"])
