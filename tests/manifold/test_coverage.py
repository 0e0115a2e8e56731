"""Grid coverage and wall leakage (issue 16 items 2, 3) against naive per-pair loops; explore CLI output."""

import json

import torch

from geosteer import manifold
from geosteer.attention import attention_weights, repeat_kv
from geosteer.interventions import steer
from geosteer.kernels.bspline import bspline_basis
from geosteer.manifold import edit as E
from geosteer.manifold.coverage import grid_coverage, wall_leakage
from tests.manifold.test_walls import _bank, _Capture

TEXTS = ["The cat sat on the mat and looked at", "Water boils at one hundred degrees"]


def _calls(model, tok, bank, layer):
    from geosteer.eval.generation import prompt_ids

    cap = _Capture(layer)
    with torch.no_grad(), steer(model, cap, bank):
        for t in TEXTS:
            model(input_ids=prompt_ids(tok, t), use_cache=False)
    return [c for c, _ in cap.calls]


def test_grid_coverage_matches_per_pair_loop(tiny_model):
    model, tok = tiny_model("qwen2")
    bank = _bank(model, grid_range=(-0.4, 0.6))
    rows = {r["layer"]: r for r in grid_coverage(model, tok, bank, TEXTS)}
    for layer in (0, 1):
        out = tot = 0.0
        for call in _calls(model, tok, bank, layer):
            a = attention_weights(call)
            q, k = call.query, repeat_kv(call.key, call.n_rep)
            b, H, L, d = q.shape
            for h in range(H):
                for dd in range(d):
                    qo = (q[:, h, :, dd] < -0.4) | (q[:, h, :, dd] > 0.6)
                    ko = (k[:, h, :, dd] < -0.4) | (k[:, h, :, dd] > 0.6)
                    out += float((a[:, h] * (qo[:, :, None] | ko[:, None, :])).sum())
                    tot += float(a[:, h].sum())
        assert abs(rows[layer]["outside"] - out / tot) < 1e-6
        assert 0 < rows[layer]["outside"] < 1


def test_wall_leakage_zero_for_exact_walls_and_measured_for_grid_walls(tiny_model):
    model, tok = tiny_model("llama")
    bank = _bank(model, grid_range=(-0.5, 0.5))
    E.apply_edits(bank, ["wall layer=1 head=0 q=0..inf", "grid-wall layer=1 head=1 dim=2"])
    rows = wall_leakage(model, tok, bank, TEXTS)
    assert [r["exact"] for r in rows] == [True, False]
    assert rows[0]["passing"] == 0.0 and rows[0]["region_mass"] > 0
    # legacy wall: Σ a |1 + S| over all pairs of (head 1, dim 2) / Σ a, per pair
    num = den = 0.0
    for call in _calls(model, tok, bank, 1):
        a = attention_weights(call).double()[:, 1]
        q = call.query.double()[:, 1, :, 2]
        k = repeat_kv(call.key, call.n_rep).double()[:, 1, :, 2]
        c = bank.coefficients[1, 1, 2].detach().double()
        g = 1 + bspline_basis(q, 8, -0.5, 0.5) @ c @ bspline_basis(k, 8, -0.5, 0.5).transpose(-1, -2)
        num += float((a * g.abs()).sum())
        den += float(a.sum())
    assert abs(rows[1]["passing"] - num / den) < 1e-6 and rows[1]["passing"] > 0.01


def test_explore_cli_reports_coverage_and_leakage(monkeypatch, capsys, tiny_model, tmp_path):
    from tests.cli_helpers import run_cli

    model, _ = tiny_model("llama")
    bank = _bank(model)
    E.apply_edit(bank, "wall layer=1 head=0 q=0..inf")
    src = manifold.save(bank, tmp_path / "s")
    code, out, err = run_cli(monkeypatch, capsys, "measure", "explore", "--surfaces", str(src), "--prompt",
                             "Hello there", "--coverage-windows", "1", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert len(doc["coverage"]) == len(bank.layers) and doc["wall_leakage"][0]["passing"] == 0.0
