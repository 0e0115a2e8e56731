"""Measurement: residual stats vs plain torch hooks written here; value space vs materialised weights."""

import json

import numpy as np
import pytest
import torch

from geosteer.attention import add_attention_handler, attention_weights, repeat_kv
from geosteer.directional.decompose import PAIR_STATS
from geosteer.directional.measure import DirectionalMeasure, measure_generation
from geosteer.interventions import steer
from geosteer.models.anatomy import anatomy

# Module names written out here on purpose (not read from the library's anatomy table).
PLAIN = {
    "tiny-llama": dict(layers=lambda m: m.model.layers, attn="self_attn", mlp="mlp", parallel=False),
    "tiny-gpt_neox": dict(layers=lambda m: m.gpt_neox.layers, attn="attention", mlp="mlp", parallel=True),
    "tiny-gemma3": dict(layers=lambda m: m.model.layers, attn="post_attention_layernorm",
                        mlp="post_feedforward_layernorm", parallel=False),
}


def _np_pair(d, z):
    d, z = d.double(), z.double()
    alpha = (d * z).sum(-1) / (z * z).sum(-1)
    par = alpha[..., None] * z
    perp = (d - par).norm(dim=-1)
    par_n = alpha.abs() * z.norm(dim=-1)
    return {"alpha": alpha, "par_norm": par_n, "perp_norm": perp, "ratio": par_n / perp,
            "abs_cos": par_n / d.norm(dim=-1), "rel_norm": d.norm(dim=-1) / z.norm(dim=-1)}


def _plain_reference(m, name, ids, mask):
    """Per layer: {site: {stat: (mean, std)}} over non-padding tokens, from plain module hooks."""
    spec = PLAIN[name]
    layers = spec["layers"](m)
    cap: dict = {}
    handles = []
    for i, layer in enumerate(layers):
        def pre(mod, args, kwargs, i=i):
            cap[(i, "x")] = (args[0] if args else kwargs["hidden_states"]).detach().clone()

        def post(mod, args, out, i=i):
            cap[(i, "out")] = (out[0] if isinstance(out, tuple) else out).detach().clone()

        def a_hook(mod, args, out, i=i):
            cap[(i, "A")] = (out[0] if isinstance(out, tuple) else out).detach().clone()

        def f_hook(mod, args, out, i=i):
            cap[(i, "F")] = (out[0] if isinstance(out, tuple) else out).detach().clone()

        handles += [layer.register_forward_pre_hook(pre, with_kwargs=True), layer.register_forward_hook(post),
                    layer.get_submodule(spec["attn"]).register_forward_hook(a_hook),
                    layer.get_submodule(spec["mlp"]).register_forward_hook(f_hook)]
    try:
        m(input_ids=ids, attention_mask=mask)
    finally:
        for h in handles:
            h.remove()
    keep = mask.bool()
    ref = {}
    for i in range(len(layers)):
        x, A, F, out = cap[(i, "x")], cap[(i, "A")], cap[(i, "F")], cap[(i, "out")]
        pairs = {"attn": (A, x), "mlp": (F, x if spec["parallel"] else x + A), "block": (out - x, x)}
        for site, (d, z) in pairs.items():
            st = _np_pair(d[keep], z[keep])
            ref[(i, site)] = {k: (v.mean().item(), v.std(unbiased=False).item(), v.min().item(),
                                  v.max().item()) for k, v in st.items()}
    return ref


@pytest.mark.parametrize("name", list(PLAIN))
def test_residual_stats_match_plain_hooks(tiny_model, name):
    m, _ = tiny_model(name)
    ids = torch.randint(5, 900, (2, 16), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, :5] = 0  # padding must not enter the statistics
    ref = _plain_reference(m, name, ids, mask)
    meas = DirectionalMeasure(value=False)
    with steer(m, meas):
        logits = m(input_ids=ids, attention_mask=mask).logits
    assert torch.equal(logits, m(input_ids=ids, attention_mask=mask).logits)  # read-only
    rows = meas.rows()
    assert len(rows) == 3 * anatomy(m).n_layers
    for r in rows:
        assert r["n_tokens"] == int(mask.sum())
        exp = ref[(r["layer"], r["site"])]
        for stat in PAIR_STATS:
            mean, std, lo, hi = exp[stat]
            for got, want in ((r[f"{stat}_mean"], mean), (r[f"{stat}_std"], std), (r[f"{stat}_min"], lo),
                              (r[f"{stat}_max"], hi)):
                assert got == pytest.approx(want, rel=1e-5, abs=1e-5), (r["layer"], r["site"], stat)


@pytest.mark.parametrize("name,padded", [("tiny-llama", True), ("tiny-gemma3", True), ("tiny-llama", False),
                                         ("tiny-qwen3", False)])
def test_value_stats_match_materialised_weights(tiny_model, name, padded):
    """Padded batches take the blockwise log-sum-exp path; unpadded causal calls take the fused kernel's
    log-sum-exp (``stock_attention_with_lse``); both against materialised attention weights."""
    m, _ = tiny_model(name)
    an = anatomy(m)
    ids = torch.randint(5, 900, (2, 14), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    if padded:
        mask[0, :3] = 0
    calls = []
    rm = add_attention_handler(an.blocks[2].attn, lambda c, p: (calls.append(c), p(c))[1])
    meas = DirectionalMeasure(layers=[2], residual=False)
    kw = {"attention_mask": mask} if padded else {}
    try:
        with steer(m, meas):
            measured = m(input_ids=ids, **kw).logits
    finally:
        rm()
    assert torch.equal(measured, m(input_ids=ids, **kw).logits)  # read-only on both paths
    call = calls[0]
    W = attention_weights(call)
    v = repeat_kv(call.value, call.n_rep)  # (b, H, k, d): head h reads kv head h // n_rep
    keep = mask.bool().numpy()
    rows = {r["head"]: r for r in meas.rows()}
    for h in range(an.n_heads):
        a_list, o_ratio, c_ratio, c_alpha = [], [], [], []
        for b in range(2):
            for t in range(14):
                if not keep[b, t]:
                    continue
                w = W[b, h, t].double()
                vt = v[b, h, t].double()
                o = w @ v[b, h].double()
                c = o - w[t] * vt
                for vec, out in ((o, o_ratio), (c, c_ratio)):
                    al = (vec @ vt) / (vt @ vt)
                    perp = (vec - al * vt).norm()
                    # r undefined when the vector is parallel to v_t / vanishes (first token: o = v, c = 0)
                    if perp > 1e-6 * max(vec.norm(), o.norm()):
                        out.append(abs(al) * vt.norm() / perp)
                c_alpha.append((c @ vt) / (vt @ vt))
                a_list.append(w[t])
        r = rows[h]
        assert r["kv_head"] == h // an.n_rep
        assert r["a_self_mean"] == pytest.approx(np.mean(a_list), abs=1e-6)
        assert r["o_ratio_mean"] == pytest.approx(np.mean(o_ratio), rel=1e-4)
        assert r["c_ratio_mean"] == pytest.approx(np.mean(c_ratio), rel=1e-4)
        assert r["o_ratio_n"] == len(o_ratio) and r["c_ratio_n"] == len(c_ratio) < len(a_list)
        assert r["c_alpha_mean"] == pytest.approx(np.mean(c_alpha), rel=1e-4, abs=1e-6)


def test_generation_per_step_and_summary_size(tiny_model):
    m, tok = tiny_model("tiny-llama")
    rows, meta = measure_generation(m, tok, "The cat sat on", max_new_tokens=3, layers="0-1")
    assert meta["steps"] == 3  # prompt + 2 cached steps produce 3 new tokens
    steps = {r["step"] for r in rows}
    assert steps == {0, 1, 2}
    n_prompt = len(tok("The cat sat on").input_ids)
    for r in rows:
        assert r["layer"] in (0, 1)
        assert r["n_tokens"] == (n_prompt if r["step"] == 0 else 1)
    json.dumps(rows)  # tidy and serialisable


def test_summary_does_not_grow_with_tokens(tiny_model):
    m, _ = tiny_model("tiny-llama")
    meas = DirectionalMeasure()
    with steer(m, meas):
        m(input_ids=torch.randint(5, 900, (1, 8)))
        size1 = sum(a.s1.numel() for a in meas._acc.values())
        m(input_ids=torch.randint(5, 900, (2, 40)))
        size2 = sum(a.s1.numel() for a in meas._acc.values())
    assert size1 == size2
    assert all(r["n_tokens"] == 88 for r in meas.rows())


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3", "tiny-gpt2", "tiny-gpt_neox", "tiny-gemma3"])
def test_stock_attention_with_lse_is_the_stock_kernel(tiny_model, name):
    """Where the fused path applies, its output is the stock output bit for bit and its log-sum-exp equals
    torch.logsumexp over the causally masked scaled scores; elsewhere (masks: sliding windows) it is None."""
    from geosteer.attention import stock_attention_with_lse

    m, _ = tiny_model(name)
    seen = []

    def handler(call, proceed):
        out, w = proceed(call)
        seen.append((call, out, stock_attention_with_lse(call)))
        return out, w

    rms = [add_attention_handler(b.attn, handler) for b in anatomy(m).blocks]
    try:
        with torch.no_grad():
            m(input_ids=torch.randint(5, 900, (2, 12), generator=torch.Generator().manual_seed(2)))
    finally:
        for r in rms:
            r()
    fused = [(c, o, f) for c, o, f in seen if f is not None]
    if name == "tiny-gemma3":  # sliding-window layers get a mask (fallback); the global layer is fused
        assert 0 < len(fused) < len(seen)
    else:
        assert len(fused) == len(seen)
    for call, out, (fo, lse) in fused:
        assert torch.equal(fo, out)
        k = repeat_kv(call.key, call.n_rep).double()
        scores = (call.query.double() @ k.transpose(-1, -2)) * call.effective_scaling
        causal = torch.ones(12, 12, dtype=torch.bool).tril()
        ref = torch.logsumexp(scores.masked_fill(~causal, float("-inf")), -1)
        torch.testing.assert_close(lse.double(), ref, rtol=1e-5, atol=1e-5)
