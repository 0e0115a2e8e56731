"""Surface figures from a saved artifact and a recorded q/k file (paper Figures 1–3), report, PNG export."""

from __future__ import annotations

import json
import shutil
import sys

import numpy as np
import pytest
import torch

import geosteer
import geosteer.manifold as M
from geosteer.kernels.bspline import bspline_basis_reference
from geosteer.viz import figures as F
from geosteer.viz import surfaces as S
from geosteer.viz.report import build_report
from geosteer.viz.results import load_tidy


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    model, tok = geosteer.load_model("tiny-llama")
    bank = M.install(model, grid_size=5, layers=[0, 2], ranges=[(-2.0, 2.0), (-3.0, 1.0)])
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        bank.coefficients.copy_(torch.randn(bank.coefficients.shape, generator=g) * 0.2)
        bank.coefficients[1, 3, 7] += 2.0  # the strongest surface: layer 2, head 3, dim 7
    folder = tmp_path_factory.mktemp("viz") / "surf"
    M.save(bank, folder)
    M.uninstall(model)
    return dict(model=model, tok=tok, folder=folder, bank=M.load(folder))


def test_surface_view_matches_scipy_basis(art):
    bank = art["bank"]
    v = S.surface_view(bank, 2, 1, 4, n=11)
    c = bank.coefficients[1, 1, 4].detach().double().numpy()
    b = bspline_basis_reference(np.linspace(-3.0, 1.0, 11), 5, -3.0, 1.0)
    np.testing.assert_allclose(v.z, b @ c @ b.T, atol=1e-5)
    assert (v.lo, v.hi) == (-3.0, 1.0) and v.norm == pytest.approx(np.linalg.norm(c), rel=1e-6)
    with pytest.raises(ValueError, match="layer 1 has no surfaces"):
        S.surface_view(bank, 1, 0, 0)
    with pytest.raises(ValueError, match="dim 16 out of range"):
        S.surface_view(bank, 0, 0, 16)


def test_surface_figure_returns_the_surface(art):
    """surface_figure(bank, layer, head, dim): a plotly figure whose values are S_d on the grid (scipy-basis reference)
    or the control net itself; bad kind / layer / dim are one-line ValueErrors."""
    bank = art["bank"]
    b = bspline_basis_reference(np.linspace(-3.0, 1.0, 9), 5, -3.0, 1.0)
    c = bank.coefficients[1, 3, 7].detach().double().numpy()
    heat = S.surface_figure(bank, 2, 3, 7, n=9)
    np.testing.assert_allclose(np.asarray(heat.data[0].z), b @ c @ b.T, atol=1e-5)
    terrain = S.surface_figure(bank, 2, 3, 7, kind="terrain", n=9)
    np.testing.assert_allclose(np.asarray(terrain.data[0].z), b @ c @ b.T, atol=1e-5)
    net = S.surface_figure(bank, 2, 3, 7, kind="controlnet")
    np.testing.assert_allclose(np.asarray(net.data[0].z), c, atol=1e-6)
    for kw, msg in [(dict(kind="pie"), "unknown figure kind 'pie'"), (dict(n=1), "n must be >= 2")]:
        with pytest.raises(ValueError, match=msg):
            S.surface_figure(bank, 2, 3, 7, **kw)
    with pytest.raises(ValueError, match="layer 1 has no surfaces"):
        S.surface_figure(bank, 1, 0, 0)
    with pytest.raises(ValueError, match="dim 16 out of range"):
        S.surface_figure(bank, 0, 0, 16)


def test_top_surfaces_is_a_norm_ranking(art):
    bank = art["bank"]
    c = bank.coefficients.detach().numpy()
    norms = {(lay, h, d): float(np.sqrt((c[i, h, d] ** 2).sum())) for i, lay in enumerate([0, 2])
             for h in range(c.shape[1]) for d in range(c.shape[2])}
    ref = sorted(norms, key=lambda k: -norms[k])[:5]
    assert [t[:3] for t in S.top_surfaces(bank, 5)] == ref
    assert S.top_surfaces(bank, 1)[0][:3] == (2, 3, 7)
    in0 = sorted((k for k in norms if k[0] == 0), key=lambda k: -norms[k])[:3]
    assert [t[:3] for t in S.top_surfaces(bank, 3, layer=0)] == in0


def test_qk_rows_use_the_kv_head_of_each_query_head():
    labels = ["a", "b"]
    q = {0: torch.arange(4 * 2 * 3, dtype=torch.float32).reshape(4, 2, 3)}   # 4 query heads
    k = {0: -torch.arange(2 * 2 * 3, dtype=torch.float32).reshape(2, 2, 3)}  # 2 KV heads (n_rep 2)
    rows = S.qk_rows(labels, q, k, [(0, 3, 2)])
    assert [(r["q"], r["k"]) for r in rows] == [(q[0][3, 0, 2].item(), k[0][1, 0, 2].item()),
                                                (q[0][3, 1, 2].item(), k[0][1, 1, 2].item())]


def test_figures_carry_tokens_and_layers(art):
    bank = art["bank"]
    v = S.surface_view(bank, 2, 3, 7, n=9)
    pts = S.token_points(bank, 2, 3, 7, ["x", "Ġy"], [0.1, -0.5], [0.3, 0.2])
    t = F.terrain_figure(v, pts)
    assert [tr.type for tr in t.data] == ["surface", "scatter3d"] and list(t.data[1].text) == ["x", "·y"]
    bq = bspline_basis_reference(np.array([0.1, -0.5]), 5, -3.0, 1.0)
    bk = bspline_basis_reference(np.array([0.3, 0.2]), 5, -3.0, 1.0)
    c = bank.coefficients[1, 3, 7].detach().double().numpy()
    np.testing.assert_allclose(t.data[1].z, np.einsum("ta,ab,tb->t", bq, c, bk), atol=1e-5)
    v0 = S.surface_view(bank, 0, 3, 7, n=9)
    p0 = S.token_points(bank, 0, 3, 7, ["x", "Ġy"], [0.0, 0.1], [0.2, 0.4])
    tr = F.trajectory_figure([v0, v], [p0, pts])
    lines = [d for d in tr.data if d.type == "scatter3d"]
    assert len(lines) == 2 and list(lines[0].z) == [0, 2] and list(lines[1].x) == [0.4, 0.2]
    grid = F.surfaces_grid_figure([v0, v], [p0, pts], cols=2)
    assert sum(d.type == "heatmap" for d in grid.data) == 2


def test_record_qk_cli_and_report_with_tokens(art, tmp_path, monkeypatch, capsys):
    from geosteer import cli

    qk = tmp_path / "qk.json"
    monkeypatch.setattr(sys, "argv", ["geosteer", "measure", "explore", "--model", "tiny-llama", "--surfaces",
                                      str(art["folder"]), "--qk-prompt", "The cat sat", "--record-qk", str(qk),
                                      "--qk-top", "2", "--no-sensitivity", "--json"])
    cli.main()
    summary = json.loads(capsys.readouterr().out)["record_qk"]
    res = load_tidy(qk)
    assert len(res.rows) == summary["rows"]
    # the prompt encoded as the tokenizer does (SmolLM2's tokenizer prepends no BOS)
    tok = art["tok"]
    assert res.meta["kind"] == "qk-points"
    assert res.meta["tokens"] == [tok.decode([i]) for i in tok("The cat sat")["input_ids"]]
    n_tok = len(res.meta["tokens"])
    # top 2 per layer (2 layers) + the strongest (head, dim) on the other layer
    assert summary["surfaces"] == 5 and len(res.rows) == 5 * n_tok
    out = tmp_path / "r.html"
    s = build_report([qk], out)  # pulls in the artifact named in the q/k file
    html = out.read_text()
    assert "token trajectories (head 3, dim 7)" in html and "top 8 surfaces of layer 2" in html
    assert "strongest surface L2 H3 D7" in html and s["figures"] >= 6
    assert "The cat sat" in html


def test_png_export(art, tmp_path):
    pytest.importorskip("kaleido", reason="kaleido not installed (pip install -e '.[png]')")
    if not (shutil.which("chromium") or shutil.which("google-chrome")):
        pytest.skip("kaleido needs a local Chromium/Chrome")
    from geosteer.io_utils import write_records

    p = write_records(tmp_path / "a.json", [{"layer": i, "x": i * i} for i in range(3)])
    s = build_report([p], tmp_path / "r.html", png_dir=tmp_path / "png")
    assert "png_problem" not in s, s.get("png_problem")
    files = sorted((tmp_path / "png").glob("*.png"))
    assert s["png"] == len(files) == 1 and files[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_norms_figure_uses_model_layer_numbers(art):
    """The per-layer norm figure is indexed by model layer (the bank covers layers 0 and 2), not by bank row."""
    bank = art["bank"]
    norms = S.surface_norms(bank)
    fig = F.norms_figure(norms, layers=S.bank_layers(bank))
    assert list(fig.data[0].x) == [0, 2]
    np.testing.assert_allclose(fig.data[0].y, norms.reshape(2, -1).max(1))
    with pytest.raises(ValueError, match="2 rows of surfaces but 3 layer numbers"):
        F.norms_figure(norms, layers=[0, 1, 2])
