"""Thm 2 check (geosteer_paper.dynamics.meanfield): the weighted-atom flow against L explicit particles moved by a
naive per-particle loop, the layer's law against the model's own modules, W₁ against scipy's assignment and
1-D Wasserstein solvers."""

import itertools

import numpy as np
import pytest
import torch
from scipy.optimize import linear_sum_assignment
from scipy.stats import wasserstein_distance

from geosteer.errors import GeosteerError
from geosteer_paper.dynamics.meanfield import AttentionLaw, flow_measure, layer_law, mean_field_rows, w1


def _random_law(seed=0, h=2, dh=3, d=5, alpha=0.0):
    g = torch.Generator().manual_seed(seed)
    r = [torch.randn(h, dh, d, generator=g, dtype=torch.float64) for _ in range(3)]
    wo = torch.randn(h, d, dh, generator=g, dtype=torch.float64)
    phi = torch.nn.Linear(d, d).double() if alpha else None
    return AttentionLaw(*r, wo, phi, alpha)


def _naive_velocity(law, u):
    """Per particle i, per head: softmax over all particles j (bidirectional), plain numpy loops."""
    wq, wk, wv, wo = (t.numpy() for t in (law.wq, law.wk, law.wv, law.wo))
    u = u.numpy()
    out = np.zeros_like(u)
    for i in range(u.shape[0]):
        f = np.zeros(u.shape[1])
        for hh in range(wq.shape[0]):
            s = np.array([(wq[hh] @ u[i]) @ (wk[hh] @ u[j]) / np.sqrt(wq.shape[1]) for j in range(u.shape[0])])
            a = np.exp(s - s.max())
            a /= a.sum()
            f += wo[hh] @ sum(a[j] * (wv[hh] @ u[j]) for j in range(u.shape[0]))
        if law.phi is not None:
            f += law.alpha * law.phi(torch.from_numpy(u[i])[None]).detach().numpy()[0]
        out[i] = f - (f @ u[i]) * u[i]
    return torch.from_numpy(out)


def _naive_flow(law, u, steps, h):
    for _ in range(steps):
        k1 = _naive_velocity(law, u)
        k2 = _naive_velocity(law, u + 0.5 * h * k1)
        k3 = _naive_velocity(law, u + 0.5 * h * k2)
        k4 = _naive_velocity(law, u + h * k3)
        u = u + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        u = u / u.norm(dim=-1, keepdim=True)
    return u


@pytest.mark.parametrize("alpha", [0.0, 0.7])
def test_empirical_measure_of_particles_is_the_weighted_atom_flow(alpha):
    """L particles, several on the same atom, move exactly as the atoms with weights n_m / L (the 1/L factors
    of numerator and denominator cancel: the theorem's characteristic-solution statement)."""
    law = _random_law(alpha=alpha)
    atoms = torch.randn(3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    atoms = atoms / atoms.norm(dim=-1, keepdim=True)
    counts = [3, 1, 2]
    particles = torch.cat([atoms[m].repeat(c, 1) for m, c in enumerate(counts)])
    got = flow_measure(law, atoms, torch.tensor(counts, dtype=torch.float64) / sum(counts), 20, 0.05)
    ref = _naive_flow(law, particles, 20, 0.05)
    start = np.cumsum([0] + counts[:-1])
    assert torch.allclose(got, ref[start], atol=1e-12, rtol=0)
    assert (got - atoms).norm() > 0.05  # the atoms moved, so the check is not of a standing flow


def test_layer_law_matches_the_model_modules(tiny_model):
    """q·k logits from the folded law equal q_proj/k_proj applied to the attention pre-norm of u (no RoPE),
    and one atom's velocity is the effective OV map V u (effective_ov, read another way)."""
    from geosteer.models.anatomy import anatomy
    from geosteer_paper.dynamics.fields import effective_ov

    model, _ = tiny_model("llama")
    an = anatomy(model)
    law = layer_law(model, 1)
    u = torch.randn(4, an.d_model, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    u = u / u.norm(dim=-1, keepdim=True)
    blk = an.blocks[1]
    with torch.no_grad():
        z = blk.attn_norm(u.to(torch.float32)).double()
        q = (z @ blk.attn.q_proj.weight.double().T).view(4, an.n_heads, an.head_dim)
        k = (z @ blk.attn.k_proj.weight.double().T).view(4, an.n_kv_heads, an.head_dim)
    k = k[:, torch.arange(an.n_heads) // an.n_rep]
    ref = torch.einsum("ihe,jhe->hij", q, k)
    got = torch.einsum("hed,id->hie", law.wq, u) @ torch.einsum("hed,jd->hje", law.wk, u).transpose(1, 2)
    assert torch.allclose(got, ref, atol=1e-5 * ref.abs().max().item())
    one = law.ambient(u[:1], torch.ones(1, dtype=torch.float64))
    assert torch.allclose(one[0], effective_ov(model, 1) @ u[0], atol=1e-9)


def test_w1_equals_assignment_for_uniform_measures_and_scipy_in_one_dimension():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((6, 4)), rng.standard_normal((6, 4))
    cost = np.linalg.norm(x[:, None] - y[None], axis=-1)
    r, c = linear_sum_assignment(cost)
    u6 = np.full(6, 1 / 6)
    assert w1(x, u6, y, u6) == pytest.approx(cost[r, c].mean(), abs=1e-10)
    brute = min(np.mean([cost[i, p[i]] for i in range(6)]) for p in itertools.permutations(range(6)))
    assert w1(x, u6, y, u6) == pytest.approx(brute, abs=1e-10)
    a, b = rng.dirichlet(np.ones(5)), rng.dirichlet(np.ones(7))
    px, py = rng.standard_normal(5), rng.standard_normal(7)
    line = lambda p: np.stack([p, np.zeros_like(p)], -1)  # noqa: E731
    assert w1(line(px), a, line(py), b) == pytest.approx(wasserstein_distance(px, py, a, b), abs=1e-9)
    with pytest.raises(GeosteerError, match="probability"):
        w1(x, np.ones(6), y, u6)


def test_rows_are_distances_and_bad_sizes_are_refused():
    law = _random_law()
    atoms = torch.randn(4, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    rows = mean_field_rows(law, atoms, [2, 8], repeats=2, steps=5, dt=0.1)
    assert len(rows) == 4 and all(r["w1_0"] > 0 for r in rows if r["particles"] == 2)
    assert all(r["w1_t"] >= 0 and r["atoms_hit"] <= 4 for r in rows)
    with pytest.raises(GeosteerError):
        mean_field_rows(law, atoms, [0, 8], repeats=1, steps=1, dt=0.1)


def test_layer_law_refuses_qk_norm_families(tiny_model):
    model, _ = tiny_model("qwen3")
    with pytest.raises(GeosteerError, match="q/k"):
        layer_law(model, 0)


@pytest.mark.parametrize("args, needle", [
    (("--sizes", "16"), "--sizes needs at least two different particle counts"),
    (("--sizes", "16,x"), "bad --sizes '16,x'"),
    (("--atoms", "1"), "--atoms must be >= 2"),
    (("--steps", "10", "--every", "3"), "--every dividing --steps"),
    (("--layers", "7"), "layer 7 out of range"),
])
def test_study_refuses_bad_input_before_the_model_loads(monkeypatch, capsys, tmp_path, args, needle):
    from tests.cli_helpers import refused_before_load

    monkeypatch.chdir(tmp_path)
    cmd = ("study", "dynamics", "mean-field", "-m", "tiny-llama")
    assert needle in refused_before_load(monkeypatch, capsys, *cmd, *args, "--out", "r.json")
    assert list(tmp_path.iterdir()) == []
