"""α continuation and basin maps (geosteer_paper.dynamics.continuation) on synthetic fields with closed-form answers."""

import numpy as np
import pytest
import torch

from geosteer.errors import GeosteerError
from geosteer_paper.dynamics.continuation import (
    basin_map,
    check_grid,
    check_steps,
    cluster_ends,
    continue_alpha,
    integrate_flow,
    ov_start_points,
    pca_plane,
)
from geosteer_paper.dynamics.fields import ReducedField

DYN = ("study", "dynamics")  # the paper studies' spelling


def _sym(d, seed):
    a = np.random.default_rng(seed).standard_normal((d, d))
    return torch.from_numpy((a + a.T) / 2)


def _linear(W):
    lin = torch.nn.Linear(W.shape[0], W.shape[0], bias=False).double()
    with torch.no_grad():
        lin.weight.copy_(W)
    lin.weight.requires_grad_(False)
    return lin


def test_continuation_tracks_eigenvectors_of_v_plus_alpha_w():
    d, steps = 6, 10
    V = torch.diag(torch.tensor([3.0, 1.5, 0.5, -0.5, -1.5, -3.0], dtype=torch.float64))
    W = 0.4 * _sym(d, 1)  # small enough that eigenvalues of V + αW stay distinct for α in [0, 1]
    starts = ov_start_points(V, 3)
    rows = continue_alpha(V, _linear(W), starts, steps)
    assert len(rows) == 3 * (steps + 1)
    for r in rows:
        M = V + r["alpha"] * W
        lam, vec = np.linalg.eigh(M.numpy())
        # the continued branch: eigenvector i of V + αW (eigenvalues stay ordered, symmetric → no crossing)
        i = d - 1 - r["track"]
        u = np.array(r["u"])
        assert abs(float(u @ vec[:, i])) > 1 - 1e-9, (r["alpha"], r["track"])
        assert r["converged"] and r["score"] < 1e-8
        others = np.delete(lam, i) - lam[i]  # closed-form tangent spectrum at the eigenvector of λ_i
        assert r["max_real"] == pytest.approx(others.max(), abs=1e-7)
        assert r["saddle_index"] == int((others > 0).sum()) == r["track"]
        assert r["max_abs_imag"] < 1e-8
        assert r["rho"] == pytest.approx(lam[i], abs=1e-8)


def test_continuation_complex_spectrum_reports_imag_part():
    # V = diag(2, R) with R a rotation-scaling block: at u = e0 the tangent spectrum is eig(R) − 2 = complex pair.
    V = torch.tensor([[2.0, 0, 0], [0, 0.5, -1.0], [0, 1.0, 0.5]], dtype=torch.float64)
    rows = continue_alpha(V, _linear(torch.zeros(3, 3, dtype=torch.float64)), ov_start_points(V, 1), 2)
    for r in rows:
        assert r["max_real"] == pytest.approx(-1.5, abs=1e-9) and r["max_abs_imag"] == pytest.approx(1.0, abs=1e-9)
        assert r["label"] == "A" and r["saddle_index"] == 0


def test_flow_basins_of_quadratic_are_hemispheres():
    # P_u A u is the (half) gradient flow of uᵀAu on the sphere: it ends at ±(top eigenvector), by sign of u₀.
    d = 5
    A = torch.diag(torch.tensor([3.0, 1.0, 0.0, -1.0, -2.0], dtype=torch.float64))
    eye = torch.eye(d, dtype=torch.float64)
    plane = (eye[1], eye[0], eye[3])  # m = e₂ (2nd eigenvector), slice spanned by the top and 4th eigenvectors
    grid = 6  # even: no grid point on a = 0
    pts, clus = basin_map({0.0: ReducedField("ov", V=A)}, plane, grid, span=1.0, steps=400, dt=0.2)
    assert len(pts) == grid * grid
    assert sorted(c["size"] for c in clus) == [grid * grid // 2] * 2
    sign_of_cluster = {c["cluster"]: np.sign(c["cos_e1"]) for c in clus}
    for c in clus:
        assert abs(c["cos_e1"]) > 1 - 1e-6 and c["end_score"] < 1e-6
    for p in pts:
        assert sign_of_cluster[p["cluster"]] == np.sign(p["a"])
        assert p["end_score"] < 1e-6


def test_euler_and_rk4_agree_on_end_points():
    A = torch.diag(torch.tensor([2.0, 1.0, -1.0], dtype=torch.float64))
    u = torch.tensor([[0.3, 0.9, 0.2], [-0.5, 0.5, 0.7]], dtype=torch.float64)
    field = ReducedField("ov", V=A)
    e = integrate_flow(field, u, 300, 0.05, "euler")
    r = integrate_flow(field, u, 300, 0.05, "rk4")
    expect = torch.tensor([[1.0, 0, 0], [-1.0, 0, 0]], dtype=torch.float64)
    assert torch.allclose(e, expect, atol=1e-5) and torch.allclose(r, expect, atol=1e-5)


def test_cluster_ends_by_angle_and_size_order():
    e = torch.tensor([[1.0, 0], [0, 1.0], [0.0, 1.0], [np.cos(0.01), np.sin(0.01)], [0, 1.0]], dtype=torch.float64)
    labels, centres = cluster_ends(e, 5.0)
    assert labels.tolist() == [1, 0, 0, 1, 0] and centres.shape == (2, 2)


def test_pca_plane_is_orthonormal_and_spans_top_variance():
    g = np.random.default_rng(0)
    x = np.zeros((200, 6))
    x[:, 0] = 5.0
    x[:, 1] = 2.0 * g.standard_normal(200)
    x[:, 2] = 0.7 * g.standard_normal(200)
    x[:, 3:] = 0.05 * g.standard_normal((200, 3))
    m, e1, e2 = pca_plane(torch.from_numpy(x))
    B = torch.stack([m, e1, e2])
    assert torch.allclose(B @ B.T, torch.eye(3, dtype=torch.float64), atol=1e-10)
    assert abs(float(m[0])) > 0.95 and abs(float(e1[1])) > 0.95 and abs(float(e2[2])) > 0.9


@pytest.mark.parametrize("call, message", [
    (lambda: check_steps(0, "alpha steps"), "alpha steps must be >= 1"),
    (lambda: check_grid(1), "grid must be >= 2"),
    (lambda: integrate_flow(ReducedField("ov", V=torch.eye(2, dtype=torch.float64)),
                            torch.eye(2, dtype=torch.float64), 5, 0.1, "leapfrog"), "unknown integrator"),
    (lambda: pca_plane(torch.ones(2, 4, dtype=torch.float64)), "at least 3"),
])
def test_bad_input(call, message):
    with pytest.raises(GeosteerError, match=message):
        call()


@pytest.mark.parametrize("argv, message", [
    ([*DYN, "continuation", "-m", "tiny-llama", "--layer", "0", "--steps", "0"], "--steps must be >= 1"),
    ([*DYN, "continuation", "-m", "tiny-llama", "--layer", "0", "--steps", "-3"], "--steps must be >= 1"),
    ([*DYN, "continuation", "-m", "tiny-llama", "--layer", "7"], "layer 7 out of range"),
    ([*DYN, "basins", "-m", "tiny-llama", "--layer", "0", "--grid", "1"], "grid must be >= 2"),
    ([*DYN, "basins", "-m", "tiny-llama", "--layer", "9"], "out of range"),
    ([*DYN, "basins", "-m", "tiny-llama", "--layer", "0", "--alphas", "0,-1"], "--alphas must be finite"),
    ([*DYN, "basins", "-m", "tiny-llama", "--layer", "0", "--method", "leapfrog"], "unknown integrator"),
    ([*DYN, "phase", "-m", "tiny-llama", "--layer", "0", "--dims", "0,2"], "--dims must be integers >= 1"),
    ([*DYN, "phase", "-m", "tiny-llama", "--layer", "5"], "out of range"),
])
def test_cli_bad_input_exits_2(argv, message, monkeypatch, capsys, tmp_path):
    from tests.cli_helpers import run_argv as run

    out = tmp_path / "x.json"
    code, _, err = run([*argv, "--out", str(out)], monkeypatch, capsys)
    assert code == 2, err
    assert err.strip().splitlines()[-1].startswith("error: ") and message in err and "Traceback" not in err
    assert not out.exists()


def test_cli_continuation_and_basins_write_tidy_records(tmp_path, monkeypatch, capsys):
    import json

    from tests.cli_helpers import run_argv as run

    out = tmp_path / "c.json"
    code, _, err = run([*DYN, "continuation", "-m", "tiny-llama", "--layer", "1", "--tracks", "2",
                        "--steps", "2", "--out", str(out), "--html", str(tmp_path / "c.html")],
                       monkeypatch, capsys)
    assert code == 0, err
    rows = json.loads(out.read_text())["rows"]
    assert [(r["track"], r["alpha"]) for r in rows] == [(t, a) for t in range(2) for a in (0.0, 0.5, 1.0)]
    assert all(r["score"] < 1e-6 for r in rows if r["alpha"] == 0.0)  # exact eigenvectors of V at α = 0
    assert (tmp_path / "c.html").read_text().count("scatter") >= 6
    out = tmp_path / "b.json"
    html = tmp_path / "b.html"
    code, _, err = run([*DYN, "basins", "-m", "tiny-llama", "--layer", "1", "--grid", "3", "--steps", "20",
                        "--tokens", "64", "--context", "32", "--residuals", "16", "--out", str(out),
                        "--html", str(html)], monkeypatch, capsys)
    assert code == 0, err
    recs = json.loads(out.read_text())["rows"]
    pts = [r for r in recs if r["table"] == "points"]
    clus = [r for r in recs if r["table"] == "clusters"]
    assert len(pts) == 2 * 9 and {p["alpha"] for p in pts} == {0.0, 1.0}
    for a in (0.0, 1.0):
        assert sum(c["size"] for c in clus if c["alpha"] == a) == 9
    assert html.read_text().count("heatmap") >= 2


def test_figures_from_tidy_rows():
    from geosteer_paper.dynamics.continuation import basin_figure, continuation_figure

    A = torch.diag(torch.tensor([3.0, 1.0, 0.0, -1.0], dtype=torch.float64))
    eye = torch.eye(4, dtype=torch.float64)
    pts, clus = basin_map({0.0: ReducedField("ov", V=A), 1.0: ReducedField("ov", V=2 * A)}, (eye[1], eye[0], eye[2]),
                          4, steps=50)
    rows = [{"table": "clusters", **c} for c in clus] + [{"table": "points", **p} for p in pts]
    fig = basin_figure(rows)
    assert len(fig.data) == 2
    z = np.array(fig.data[0].z)  # rows b, columns a; cluster labels split by the sign of a
    assert z.shape == (4, 4) and (z[:, :2] == z[0, 0]).all() and (z[:, 2:] != z[0, 0]).all()
    V = torch.diag(torch.tensor([2.0, 1.0, -1.0], dtype=torch.float64))
    crow = continue_alpha(V, _linear(torch.zeros(3, 3, dtype=torch.float64)), ov_start_points(V, 2), 2)
    fig = continuation_figure(crow)
    assert len(fig.data) == 6
    assert list(fig.data[4].y) == [r["saddle_index"] for r in crow if r["track"] == 1] == [1, 1, 1]


def test_fit_linear_field_recovers_matrix_and_spectrum():
    from geosteer_paper.dynamics.continuation import fit_linear_field

    g = np.random.default_rng(3)
    z = g.standard_normal((50, 3))
    J = np.array([[-1.0, 2.0, 0.0], [-2.0, -1.0, 0.0], [0.0, 0.0, 0.5]])  # eigenvalues −1 ± 2i, 0.5
    y = (z - z.mean(0)) @ J.T + np.array([0.1, -0.2, 0.3])
    fit = fit_linear_field(z, y)
    assert np.allclose(fit["J"], J, atol=1e-10) and np.allclose(fit["c"], [0.1, -0.2, 0.3], atol=1e-10)
    assert fit["r2"] == pytest.approx(1.0) and fit["n_pos"] == 1
    assert fit["max_real"] == pytest.approx(0.5) and fit["max_abs_imag"] == pytest.approx(2.0)
    with pytest.raises(GeosteerError, match="needs more than"):
        fit_linear_field(z[:4], y[:4])


def test_inward_scores_and_phase_reconstruction():
    from geosteer_paper.dynamics.continuation import inward_scores, phase_reconstruction

    g = np.random.default_rng(4)
    z = g.standard_normal((40, 2))
    assert inward_scores(z, -(z - z.mean(0)))["inward_fraction"] == 1.0
    out = inward_scores(z, z - z.mean(0))
    assert out["inward_fraction"] == 0.0 and out["inward_cos"] == pytest.approx(-1.0)
    # directions near e0 spread in (e1, e2); field = −(tangent displacement in that plane): a sink, J ≈ −I.
    d = 6
    x = np.zeros((80, d))
    x[:, 0] = 1.0
    x[:, 1:3] = 0.05 * g.standard_normal((80, 2))
    u = torch.from_numpy(x / np.linalg.norm(x, axis=1, keepdims=True))
    gf = torch.zeros_like(u)
    gf[:, 1:3] = -(u[:, 1:3] - u[:, 1:3].mean(0))
    rec = phase_reconstruction(u, gf, 2)
    assert rec["inward_fraction"] == 1.0 and rec["r2"] == pytest.approx(1.0)
    assert np.allclose(rec["J"], -np.eye(2), atol=1e-3) and rec["n_pos"] == 0  # sphere curvature: ~1e-5


def test_cli_phase_on_real_updates(tmp_path, monkeypatch, capsys):
    import json

    from geosteer_paper.dynamics.continuation import real_updates
    from tests.cli_helpers import run_argv as run

    out = tmp_path / "p.json"
    code, _, err = run([*DYN, "phase", "-m", "tiny-llama", "--layer", "1", "--dims", "2,3", "--samples", "40",
                        "--tokens", "64", "--context", "32", "--out", str(out)], monkeypatch, capsys)
    assert code == 0, err
    rows = json.loads(out.read_text())["rows"]
    assert [r["k"] for r in rows] == [2, 3] and all(0 <= r["inward_fraction"] <= 1 and r["n"] == 40 for r in rows)
    import geosteer

    m, _ = geosteer.load_model("tiny-llama")
    ids = torch.randint(3, 100, (2, 16), generator=torch.Generator().manual_seed(0))  # not padding id 2 (zero)
    u, g = real_updates(m, ids, 0, 10)
    assert torch.allclose(u.norm(dim=-1), torch.ones(10, dtype=torch.float64))
    assert (g * u).sum(-1).abs().max() < 1e-10  # tangent to the sphere
    # independent: the block's update from a plain forward with hidden states
    with torch.no_grad():
        hs = m(input_ids=ids, output_hidden_states=True).hidden_states
    x = hs[0][:, 1:].reshape(-1, hs[0].shape[-1]).double()
    d = (hs[1][:, 1:].reshape(-1, hs[1].shape[-1]).double() - x) / x.norm(dim=-1, keepdim=True)
    un = x / x.norm(dim=-1, keepdim=True)
    gd = d - (d * un).sum(-1, keepdim=True) * un
    pick = torch.from_numpy(np.random.default_rng(0).choice(x.shape[0], size=10, replace=False))
    assert torch.allclose(u, un[pick], atol=1e-6) and torch.allclose(g, gd[pick], atol=1e-5)
