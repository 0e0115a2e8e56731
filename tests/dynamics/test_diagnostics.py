"""Diagnostics against a naive recomputation with plain torch hooks and numpy loops; padding is masked."""

import numpy as np
import pytest
import torch

from geosteer.dynamics import sphere
from geosteer.dynamics.diagnostics import diagnose, wide
from tests.conftest import sample_ids

# Plain module paths, written out here on purpose (independent of the anatomy table).
PATHS = {
    "llama": dict(layers=lambda m: m.model.layers, attn="self_attn", ffn="mlp",
                  phi=lambda L, z: L.mlp(L.post_attention_layernorm(z)), parallel=False),
    "gemma3": dict(layers=lambda m: m.model.layers, attn="post_attention_layernorm",
                   ffn="post_feedforward_layernorm",
                   phi=lambda L, z: L.post_feedforward_layernorm(L.mlp(L.pre_feedforward_layernorm(z))),
                   parallel=False),
    "gpt2": dict(layers=lambda m: m.transformer.h, attn="attn", ffn="mlp",
                 phi=lambda L, z: L.mlp(L.ln_2(z)), parallel=False),
    "gpt_neox": dict(layers=lambda m: m.gpt_neox.layers, attn="attention", ffn="mlp",
                     phi=lambda L, z: L.mlp(L.post_attention_layernorm(z)), parallel=True),
}


def _first(o):
    return o[0] if isinstance(o, tuple) else o


def naive_capture(model, ids, family):
    p = PATHS[family]
    cap, handles = {}, []
    for i, L in enumerate(p["layers"](model)):
        handles.append(L.register_forward_pre_hook(
            lambda m, a, k, i=i: cap.__setitem__((i, "x"), (a[0] if a else k["hidden_states"]).detach()),
            with_kwargs=True))
        handles.append(L.register_forward_hook(
            lambda m, a, o, i=i: cap.__setitem__((i, "y"), _first(o).detach())))
        handles.append(getattr(L, p["attn"]).register_forward_hook(
            lambda m, a, o, i=i: cap.__setitem__((i, "A"), _first(o).detach())))
        handles.append(getattr(L, p["ffn"]).register_forward_hook(
            lambda m, a, o, i=i: cap.__setitem__((i, "F"), _first(o).detach())))
    with torch.no_grad():
        model(ids)
    for h in handles:
        h.remove()
    with torch.no_grad():
        for i, L in enumerate(p["layers"](model)):
            cap[(i, "Fx")] = p["phi"](L, cap[(i, "x")]).detach()
    return cap


def naive_layer(cap, i, parallel):
    x, A, F, y, Fx = (cap[(i, k)][0].double().numpy() for k in ("x", "A", "F", "y", "Fx"))
    out = {k: [] for k in ("cos_attn", "defect", "ffn_tangential_frac", "du_norm")}
    for t in range(x.shape[0]):
        u = x[t] / np.linalg.norm(x[t])
        P = np.eye(len(u)) - np.outer(u, u)
        du = P @ (y[t] / np.linalg.norm(y[t]) - u)
        pa = P @ A[t]
        out["cos_attn"].append(pa @ du / (np.linalg.norm(pa) * np.linalg.norm(du)))
        out["du_norm"].append(np.linalg.norm(du))
        fx = F[t] if parallel else Fx[t]
        out["defect"].append(np.linalg.norm(F[t] - fx) / (np.linalg.norm(fx) + 1e-6))
        m = x[t] + A[t] if not parallel else x[t]
        v = m / np.linalg.norm(m)
        Pv = np.eye(len(v)) - np.outer(v, v)
        out["ffn_tangential_frac"].append(np.linalg.norm(Pv @ F[t]) / np.linalg.norm(F[t]))
    res = {k: float(np.mean(v)) for k, v in out.items()}
    U = lambda z: z / np.linalg.norm(z, axis=1, keepdims=True)  # noqa: E731
    div = lambda Z: 1.0 - np.sum(np.mean(U(Z), axis=0) ** 2)  # noqa: E731
    res["ddiv_attn"] = div(x + A) - div(x)
    res["ddiv_ffn"] = div(y) - div(x + A)
    n = np.linalg.norm(x, axis=1)
    res["norm_cv"] = float(n.std(ddof=1) / n.mean())
    return res


@pytest.mark.parametrize("family", list(PATHS))
def test_diagnostics_match_naive_recomputation(family, tiny_model):
    model, tok = tiny_model(family)
    ids = sample_ids(tok, n_batch=1)
    rows = wide(diagnose(model, ids))
    cap = naive_capture(model, ids, family)
    for i, r in enumerate(rows):
        ref = naive_layer(cap, i, PATHS[family]["parallel"])
        for k, v in ref.items():
            assert r[k] == pytest.approx(v, abs=2e-5, rel=1e-4), (family, i, k)
        assert r["cos_full"] == pytest.approx(1.0, abs=1e-4)  # the realised update is A + Φ
        assert r["deficit"] == pytest.approx(1 - ref["cos_attn"], abs=2e-5)
        if PATHS[family]["parallel"]:
            assert r["defect"] == 0.0


def test_padding_is_masked(tiny_model):
    model, tok = tiny_model("llama")
    a = tok("The cat sat on the mat and looked at the bird outside.", return_tensors="pt").input_ids[0]
    b = tok("Rivers flow to the sea.", return_tensors="pt").input_ids[0]
    pad = torch.full((len(a) - len(b),), tok.pad_token_id)
    ids = torch.stack([a, torch.cat([b, pad])])
    mask = torch.stack([torch.ones_like(a), torch.cat([torch.ones_like(b), torch.zeros_like(pad)])])
    padded = diagnose(model, ids, mask)
    sep_a, sep_b = diagnose(model, a[None]), diagnose(model, b[None])
    for ra, rb, rp in zip(sep_a, sep_b, padded, strict=True):
        assert rp["n"] == ra["n"] + rb["n"]
        if rp["metric"].startswith(("div", "ddiv")) or rp["metric"].startswith("norm_cv"):
            continue
        pooled = (ra["mean"] * ra["n"] + rb["mean"] * rb["n"]) / (ra["n"] + rb["n"])
        assert rp["mean"] == pytest.approx(pooled, abs=1e-5, rel=1e-5), rp["metric"]
    dp = {(r["layer"], r["metric"]): r["mean"] for r in padded}
    for ra, rb in zip(sep_a, sep_b, strict=True):
        if ra["metric"] == "div_post":
            assert dp[(ra["layer"], "div_post")] == pytest.approx((ra["mean"] + rb["mean"]) / 2, abs=1e-5)


def test_sphere_geometry_against_numpy():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 7, 32, generator=g, dtype=torch.float64)
    phi = torch.randn(5, 7, 32, generator=g, dtype=torch.float64) * 3
    u = sphere.unit(x)
    tan, rad = sphere.tangential(u, phi), sphere.radial(u, phi)
    assert (tan + rad - phi).abs().max() <= 1e-5
    assert (tan * u).sum(-1).abs().max() <= 1e-5
    un, pn = u.numpy(), phi.numpy()
    for b in range(5):
        for t in range(7):
            P = np.eye(32) - np.outer(un[b, t], un[b, t])
            assert np.allclose(tan[b, t].numpy(), P @ pn[b, t], atol=1e-10)
    mask = torch.rand(5, 7, generator=g) > 0.3
    mask[:, 0] = True
    d = sphere.diversity(u, mask)
    for b in range(5):
        sel = un[b][mask[b].numpy()]
        assert d[b].item() == pytest.approx(1 - np.sum(sel.mean(0) ** 2), abs=1e-10)
    n = torch.rand(100, generator=g, dtype=torch.float64) + 1
    assert sphere.norm_cv(n).item() == pytest.approx(np.std(n.numpy(), ddof=1) / np.mean(n.numpy()))
