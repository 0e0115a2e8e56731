"""FFN variants, gains, parallel blocks, top-k, OV probing, gates: behaviour vs independent computations."""

import json
import math

import numpy as np
import pytest
import torch

from geosteer import anatomy
from geosteer.attention import AttentionCall
from geosteer.dynamics.gates import FFNGates, load_gates
from geosteer.dynamics.ov import head_ov, ov_rows, ov_weights
from geosteer.dynamics.parallel import estimated_speedup, layer_order, safe_speedup
from geosteer.dynamics.topk import TopKAttention, topk_attention
from geosteer.dynamics.variants import FFNVariant, Gains, Parallelize
from geosteer.errors import ArtifactError
from geosteer.interventions import steer
from geosteer.record import Recorder
from tests.conftest import sample_ids


def _record(model, ids, layer, *ivs):
    rec = Recorder(("mlp_in", "mlp_out", "attn_out", "resid_post"), layers=[layer])
    with torch.no_grad(), steer(model, *ivs, rec):
        logits = model(ids).logits
    return {p: rec[p, layer][0] for p in ("mlp_in", "mlp_out", "attn_out", "resid_post")}, logits


def _mlp_reference(model, family: str, ids, layer: int) -> torch.Tensor:
    """The residual state the FFN reads, from plain hooks on hand-named modules: x + A(x) for sequential
    blocks (Gemma-3: x + post_attention_layernorm(A)), the block input x for GPT-NeoX's parallel residual."""
    block = model.gpt_neox.layers[layer] if family == "gpt_neox" else model.model.layers[layer]
    got = {}
    hooks = [block.register_forward_pre_hook(
        lambda m, a, k: got.__setitem__("x", a[0] if a else k["hidden_states"]), with_kwargs=True)]
    attn = {"llama": "self_attn", "gemma3": "post_attention_layernorm"}.get(family)
    attn = getattr(block, attn) if attn is not None else None
    if attn is not None:
        hooks.append(attn.register_forward_hook(
            lambda m, a, o: got.__setitem__("A", o[0] if isinstance(o, tuple) else o)))
    try:
        with torch.no_grad():
            model(ids)
    finally:
        for h in hooks:
            h.remove()
    assert family != "gpt_neox" or model.config.use_parallel_residual
    return (got["x"] + got["A"] if attn is not None else got["x"]).double()


@pytest.mark.parametrize("family", ["llama", "gemma3", "gpt_neox"])
def test_radial_and_tangential_variants_split_phi(family, tiny_model):
    model, tok = tiny_model(family)
    ids = sample_ids(tok)
    layer = 1
    stock, _ = _record(model, ids, layer)
    rad, _ = _record(model, ids, layer, FFNVariant("radial", [layer]))
    tan, _ = _record(model, ids, layer, FFNVariant("tangential", [layer]))
    zero, _ = _record(model, ids, layer, FFNVariant("zero", [layer]))
    u = _mlp_reference(model, family, ids, layer)  # the split's reference u, from plain hooks
    torch.testing.assert_close(stock["mlp_in"].double(), u, rtol=1e-5, atol=1e-5)
    u = u / u.norm(dim=-1, keepdim=True)
    phi = stock["mlp_out"].double()
    assert (rad["mlp_out"].double() + tan["mlp_out"].double() - phi).abs().max() <= 1e-5
    assert ((tan["mlp_out"].double() * u).sum(-1)).abs().max() <= 1e-5
    # the radial part is parallel to u: its tangential remainder vanishes
    r = rad["mlp_out"].double()
    assert (r - (r * u).sum(-1, keepdim=True) * u).abs().max() <= 1e-5
    assert zero["mlp_out"].abs().max() == 0
    att0, _ = _record(model, ids, layer, FFNVariant("attn_zero", [layer]))
    assert att0["attn_out"].abs().max() == 0


def test_gains_scale_branches(tiny_model):
    model, tok = tiny_model("llama")
    ids = sample_ids(tok)
    stock, _ = _record(model, ids, 0)
    g, _ = _record(model, ids, 0, Gains(beta_attn=0.5, alpha_ffn=2.0, layers=[0]))
    torch.testing.assert_close(g["attn_out"], 0.5 * stock["attn_out"])
    x = g["resid_post"] - g["attn_out"] - g["mlp_out"]  # block input is unchanged at layer 0
    ref = stock["resid_post"] - stock["attn_out"] - stock["mlp_out"]
    torch.testing.assert_close(x, ref, atol=1e-5, rtol=0)


def test_parallel_block_matches_manual_surrogate(tiny_model):
    model, tok = tiny_model("llama")
    ids = sample_ids(tok, n_batch=1)
    L = model.model.layers[1]
    got = {}
    h = L.register_forward_pre_hook(lambda m, a, k: got.__setitem__("x", (a[0] if a else k["hidden_states"])),
                                    with_kwargs=True)
    h2 = L.register_forward_hook(lambda m, a, o: got.__setitem__("y", o[0] if isinstance(o, tuple) else o))
    h3 = L.self_attn.register_forward_hook(lambda m, a, o: got.__setitem__("A", o[0]))
    try:
        with torch.no_grad(), steer(model, Parallelize([1])):
            model(ids)
    finally:
        h.remove(), h2.remove(), h3.remove()
    with torch.no_grad():
        expected = got["x"] + got["A"] + L.mlp(L.post_attention_layernorm(got["x"]))
    torch.testing.assert_close(got["y"], expected, atol=1e-5, rtol=1e-5)


def test_topk_attention_against_naive_loops():
    g = torch.Generator().manual_seed(1)
    b, H, Hkv, q, d = 2, 4, 2, 6, 8

    class Mod(torch.nn.Module):
        is_causal = True

    call = AttentionCall(Mod(), torch.randn(b, H, q, d, generator=g), torch.randn(b, Hkv, q, d, generator=g),
                         torch.randn(b, Hkv, q, d, generator=g), None, None, 0.0)
    for k in (1, 2, 4, 10):
        out = topk_attention(call, k)  # (b, q, H, d)
        for bi in range(b):
            for h in range(H):
                kv = h // (H // Hkv)
                for i in range(q):
                    scores = [float(call.query[bi, h, i] @ call.key[bi, kv, j]) / math.sqrt(d)
                              for j in range(i + 1)]
                    w = np.exp(np.array(scores) - max(scores))
                    w /= w.sum()
                    keep = np.argsort(-w)[:k]
                    ref = sum(w[j] * call.value[bi, kv, j].numpy() for j in keep) / w[keep].sum()
                    assert np.allclose(out[bi, i, h].numpy(), ref, atol=1e-5)


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_ov_probe_matches_weights(family, tiny_model):
    model, _ = tiny_model(family)
    an = anatomy(model)
    dv, d = an.head_dim, an.d_model
    probed = ov_weights(model)
    for layer in range(an.n_layers):
        w_v, w_o = probed[layer]
        for h in range(an.n_heads):
            g = h // an.n_rep
            if family == "llama":
                att = model.model.layers[layer].self_attn
                ref = att.o_proj.weight[:, h * dv:(h + 1) * dv] @ att.v_proj.weight[g * dv:(g + 1) * dv]
            else:  # Conv1D: y = x W + b, W (in, out); c_attn packs q | k | v
                att = model.transformer.h[layer].attn
                wv = att.c_attn.weight[:, 2 * d:][:, h * dv:(h + 1) * dv]
                ref = (wv @ att.c_proj.weight[h * dv:(h + 1) * dv]).T
            torch.testing.assert_close(head_ov(w_v, w_o, h, an.n_rep), ref, atol=1e-5, rtol=1e-4)
    rows = ov_rows(model)
    V = head_ov(*probed[0], 0, an.n_rep).double().numpy()
    ev = np.linalg.eigvals(V)
    top = ev[np.argmax(np.abs(ev))]
    assert rows[0]["dominant_real"] == pytest.approx(top.real, abs=1e-6)
    skew, sym = (V - V.T) / 2, (V + V.T) / 2
    assert rows[0]["skew_sym_ratio"] == pytest.approx(np.linalg.norm(skew) / np.linalg.norm(sym), rel=1e-6)


def test_gates_save_load_and_training(tiny_model, tmp_path):
    from geosteer.dynamics.gates import train_gates
    from geosteer.train import TrainConfig

    model, tok = tiny_model("gpt2")
    ids = sample_ids(tok)
    gates = FFNGates.for_model(model, layers=[0, 2])
    with torch.no_grad():
        gates.alpha.copy_(torch.tensor([0.5, 1.5]))
    stock, _ = _record(model, ids, 2)
    gated, _ = _record(model, ids, 0, gates)
    ref0, _ = _record(model, ids, 0)
    torch.testing.assert_close(gated["mlp_out"], 0.5 * ref0["mlp_out"])
    gates.save(tmp_path / "g")
    cfg = json.loads((tmp_path / "g" / "geosteer_config.json").read_text())
    assert cfg["layers"] == [0, 2] and cfg["method"] == "dynamics.gates"
    loaded = load_gates(tmp_path / "g", model)
    assert torch.equal(loaded.alpha, gates.alpha) and loaded.layers == [0, 2]
    other, _ = tiny_model("llama")
    with pytest.raises(ArtifactError, match="made for base model 'tiny-gpt2'"):
        load_gates(tmp_path / "g", other)
    with pytest.raises(ArtifactError, match="not a geosteer-gates artifact"):
        load_gates(tmp_path, model)
    trained, info = train_gates(model, tok, TrainConfig(lr=5e-2, steps=3, batch_size=2, seq_len=16,
                                                        eval_before_after=False, checkpoint_every=0),
                                train_ids=ids[0].repeat(8), log=None)
    assert info["steps_done"] == 3 and not torch.equal(trained.alpha.detach(), torch.ones(3))
    assert all(not p.requires_grad for p in model.parameters())


def test_selection_orders_and_speedup_math():
    c = [0.3, 0.1, 0.9, 0.2]
    assert layer_order(c, "low") == [1, 3, 0, 2]
    assert layer_order(c, "high") == [2, 0, 3, 1]
    r0, r1 = layer_order(c, "random", 0), layer_order(c, "random", 1)
    assert sorted(r0) == [0, 1, 2, 3] and r0 == layer_order(c, "random", 0) and r0 != r1
    times = [{"layer": 0, "t_attn": 1.0, "t_ffn": 3.0}, {"layer": 1, "t_attn": 2.0, "t_ffn": 2.0}]
    assert estimated_speedup(times, []) == 1.0
    assert estimated_speedup(times, [0]) == pytest.approx(8 / 7)
    assert estimated_speedup(times, [0, 1]) == pytest.approx(8 / 5)
    rows = [{"strategy": "low", "seed": 0, "n_parallel": n, "loss_increase": dl, "speedup_est": 1 + n / 10}
            for n, dl in ((0, 0.0), (1, 0.01), (2, 0.04), (3, 0.2))]
    rows += [{"strategy": "high", "seed": 0, "n_parallel": n, "loss_increase": dl, "speedup_est": 1 + n / 10}
             for n, dl in ((0, 0.0), (1, 0.3))]
    safe = {r["strategy"]: r for r in safe_speedup(rows, 0.05)}
    assert safe["low"]["max_layers"] == 2 and safe["low"]["speedup_est"] == pytest.approx(1.2)
    assert safe["high"]["max_layers"] == 0


def test_bad_input_errors(tiny_model):
    model, tok = tiny_model("llama")
    with pytest.raises(ValueError, match="unknown FFN variant 'sideways'; valid: full"):
        FFNVariant("sideways")
    with pytest.raises(ValueError, match="k >= 1"):
        TopKAttention(0)
    with pytest.raises(ValueError, match="layer 7 out of range: this model has layers 0..2"):
        with steer(model, FFNVariant("zero", [7])):
            pass
    with pytest.raises(ValueError, match="layer 3 out of range"):
        with steer(model, Parallelize([3])):
            pass
    with pytest.raises(ValueError, match="unknown selection strategy"):
        layer_order([0.1], "middle")
    with pytest.raises(ValueError, match="out of range"):
        FFNGates.for_model(model, layers=[5])
