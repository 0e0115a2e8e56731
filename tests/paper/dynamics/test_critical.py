"""Reduced fields and critical candidates (issue 13 item 1) against independent computations: the closed-form
critical set of P_u V u, central finite differences, and a single-token attention forward."""

import math

import numpy as np
import pytest
import torch

from geosteer.errors import GeosteerError
from geosteer.hooks import HookSet, add_hook
from geosteer_paper.dynamics.critical import (
    critical_study,
    find_candidates,
    ov_exact,
    random_seeds,
    refine,
    summarise,
)
from geosteer_paper.dynamics.fields import (
    ReducedField,
    classify,
    effective_ov,
    layer_fields,
    tangent_basis,
    tangent_jacobian,
)
from geosteer_paper.reproduction.references import finite_difference_tangent_jacobian


def _sym(d, lam, seed=0):
    g = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
    return Q @ torch.diag(lam) @ Q.T, Q


def test_tangent_basis_is_orthonormal_and_tangent():
    for seed in range(3):
        u = random_seeds(1, 7, seed)[0]
        for v in (u, -u):
            B = tangent_basis(v)
            assert B.shape == (7, 6)
            torch.testing.assert_close(B.T @ B, torch.eye(6, dtype=torch.float64))
            assert (B.T @ v).abs().max() < 1e-12


def test_symmetric_V_closed_form_spectrum_and_labels():
    lam = torch.tensor([3.0, 2.0, 0.5, -1.0, -2.5], dtype=torch.float64)
    V, Q = _sym(5, lam)
    f = ReducedField("ov", V=V)
    for i in range(5):
        for sign in (1, -1):
            u = sign * Q[:, i]
            assert f.score(u[None]).item() < 1e-12
            ev = torch.linalg.eigvals(tangent_jacobian(f, u))
            expect = torch.sort(torch.cat([lam[:i], lam[i + 1:]]) - lam[i]).values
            torch.testing.assert_close(torch.sort(ev.real).values, expect)
            assert ev.imag.abs().max() < 1e-12
            want = "A" if i == 0 else "R" if i == 4 else "S"
            assert classify(ev)["label"] == want


def test_finder_recovers_all_critical_points_of_symmetric_field():
    lam = torch.tensor([3.0, 2.0, 0.5, -1.0, -2.5], dtype=torch.float64)
    V, Q = _sym(5, lam, seed=1)
    f = ReducedField("ov", V=V)
    seeds = random_seeds(120, 5, seed=3)
    rows = find_candidates(f, seeds, ["random"] * 120, threshold=0.05)
    assert len(rows) == 10  # ±5 eigenvectors, nothing else
    for r in rows:
        u = torch.tensor(r["u"], dtype=torch.float64)
        i = int((Q.T @ u).abs().argmax())
        assert abs(abs(float(Q[:, i] @ u)) - 1) < 1e-9
        assert r["refined_label"] == ("A" if i == 0 else "R" if i == 4 else "S")
        assert r["survives"] and r["refined_score"] < 1e-9
        assert r["rho"] == pytest.approx(lam[i].item(), abs=1e-6)
    s = summarise(rows, "refined_label")
    assert (s["A"], s["S"], s["R"]) == (2, 6, 2)


def test_exact_ov_set_matches_finder_on_nonsymmetric_V():
    g = torch.Generator().manual_seed(4)
    d = 6
    P = torch.randn(d, d, generator=g, dtype=torch.float64)
    lam = torch.tensor([2.5, 1.7, 0.4, -0.3, -1.1, -2.0], dtype=torch.float64)
    V = P @ torch.diag(lam) @ torch.linalg.inv(P)  # non-symmetric, real spectrum
    ex = ov_exact(V)
    assert (ex["n"], ex["A"], ex["S"], ex["R"]) == (12, 2, 8, 2)
    f = ReducedField("ov", V=V)
    rows = find_candidates(f, random_seeds(120, d, 5), ["random"] * 120, threshold=0.05, steps=1000)
    roots = [r for r in rows if r["converged"] and r["duplicate_of"] is None]
    assert len(roots) >= 8  # the descent need not reach every basin; what it finds must be exact
    top, bottom = lam.max().item(), lam.min().item()
    for r in roots:
        u = torch.tensor(r["u"], dtype=torch.float64)
        rho = float(u @ V @ u)
        assert (V @ u - rho * u).norm() < 1e-8 * V.norm()
        i = int((lam - rho).abs().argmin())
        assert abs(lam[i].item() - rho) < 1e-6
        assert r["refined_label"] == ("A" if rho == pytest.approx(top) else "R" if rho == pytest.approx(bottom)
                                      else "S")
    s = summarise(rows, "refined_label")
    assert s["A"] == 2 and s["R"] == 2


def test_refinement_converges_and_keeps_label():
    lam = torch.tensor([2.0, 1.0, -0.5, -3.0], dtype=torch.float64)
    V, Q = _sym(4, lam, seed=2)
    f = ReducedField("ov", V=V)
    u0 = Q[:, 1] + 0.02 * Q[:, 3]
    u0 = u0 / u0.norm()
    assert f.score(u0[None]).item() > 1e-3
    ur, iters = refine(f, u0)
    assert f.score(ur[None]).item() < 1e-10 and iters <= 12
    assert abs(float(ur @ Q[:, 1])) > 1 - 1e-12


@pytest.mark.parametrize("family", ["llama", "gemma3", "gpt2"])
def test_tangent_jacobian_matches_finite_differences(family, tiny_model):
    model, _ = tiny_model(family)
    fields = layer_fields(model, 1, alpha=0.7)
    for kind, f in fields.items():
        u = random_seeds(1, f.d, seed=11)[0]
        J = tangent_jacobian(f, u)
        Jfd = finite_difference_tangent_jacobian(f, u, tangent_basis(u))
        rel = ((J - Jfd).norm() / Jfd.norm()).item()
        assert rel <= 1e-4, f"{family}/{kind}: relative error {rel:.2e}"


@pytest.mark.parametrize("family", ["llama", "qwen2", "gemma3"])
def test_effective_ov_equals_single_token_attention(family, tiny_model):
    """A one-token sequence attends only to itself, so its attention update is W_OV · attn_norm(u): with
    RMSNorm and no projection biases it must equal V u (Gemma-3's post-attention norm is outside V)."""
    model, _ = tiny_model(family)
    from geosteer import anatomy

    an = anatomy(model)
    layer = 1
    V = effective_ov(model, layer)
    u = random_seeds(1, an.d_model, seed=2)[0]
    got = {}
    hooks = HookSet()
    add_hook(model, "resid_pre", layer, lambda x, ctx: u.to(x.dtype).view(1, 1, -1), hooks)
    hooks.add_handle(an.blocks[layer].attn.register_forward_hook(
        lambda m, a, o: got.__setitem__("a", o[0] if isinstance(o, tuple) else o)))
    try:
        with torch.no_grad():
            model(input_ids=torch.zeros(1, 1, dtype=torch.long), use_cache=False)
    finally:
        hooks.remove()
    if any(getattr(m, "bias", None) is not None for m in an.blocks[layer].attn.modules()
           if isinstance(m, torch.nn.Linear)):
        pytest.skip("projection biases are dropped from V")
    torch.testing.assert_close(got["a"][0, 0].double(), V @ u, atol=1e-4, rtol=1e-4)


def test_study_on_tiny_model_runs_and_ov_candidates_are_eigenvectors(tiny_model):
    model, tok = tiny_model("llama")
    ids = torch.randint(0, 100, (2, 24), generator=torch.Generator().manual_seed(0))
    cand, summ = critical_study(model, ids, [0], n_real=8, n_random=24, steps=300)
    V = layer_fields(model, 0, ("ov",))["ov"].V
    ov = [c for c in cand if c["field"] == "ov"]
    assert ov, "no attention-only candidates found"
    converged = [c for c in ov if c["converged"]]
    assert converged, "no attention-only candidate converged: the eigenvector check would be vacuous"
    eigenvalues = np.linalg.eigvals(V.double().numpy())
    for c in converged:
        u = torch.tensor(c["u"], dtype=torch.float64)
        rho = float(u @ V @ u)
        assert (V @ u - rho * u).norm() < 1e-6 * V.norm()
        assert np.abs(eigenvalues - rho).min() < 1e-6 * np.abs(eigenvalues).max()  # numpy's own spectrum
    ex = [s for s in summ if s["field"] == "ov" and s["stage"] == "exact" and s["layer"] == 0][0]
    roots = [c for c in ov if c["converged"] and c["duplicate_of"] is None]
    assert len(roots) <= ex["n"] + 2 * ex["null_dim"] * (ex["null_dim"] > 0)
    assert {s["stage"] for s in summ} == {"candidate", "refined", "exact"}
    assert all(math.isfinite(c["max_real"]) for c in cand)


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5, float("nan")])
def test_bad_threshold_raises(bad, tiny_model):
    model, _ = tiny_model("llama")
    with pytest.raises(GeosteerError, match="threshold"):
        critical_study(model, None, [0], n_real=0, n_random=4, threshold=bad)


def test_unknown_field_raises(tiny_model):
    model, _ = tiny_model("llama")
    with pytest.raises(GeosteerError, match="unknown field 'attn'"):
        layer_fields(model, 0, ("attn",))


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_direct_ov_read_matches_probe(family, tiny_model):
    from geosteer import anatomy
    from geosteer.dynamics.ov import ov_weights
    from geosteer_paper.dynamics.fields import _ov_sum_direct

    model, _ = tiny_model(family)
    an = anatomy(model)
    w_v, w_o = ov_weights(model)[1]
    probe = sum((w_v[h // an.n_rep].double() @ w_o[h].double()) for h in range(an.n_heads)).T
    torch.testing.assert_close(_ov_sum_direct(an, 1), probe, atol=1e-5, rtol=1e-5)


def test_exact_ov_set_skips_the_null_space():
    """Rank-deficient V (as with GQA): the zero eigenspace is a continuum of zeros with F = 0, not counted."""
    g = torch.Generator().manual_seed(0)
    A = torch.randn(8, 3, generator=g, dtype=torch.float64)
    B = torch.randn(3, 8, generator=g, dtype=torch.float64)
    ex = ov_exact(A @ B)
    assert ex["null_dim"] == 5 and ex["rank"] == 3
    ev = torch.linalg.eigvals(B @ A)  # the non-zero spectrum of AB
    assert ex["real_eigenvalues"] == int((ev.imag.abs() < 1e-9).sum())
