"""Surface strength and asymmetry studies (``geosteer study manifold strength|asymmetry``): scale 0 is the stock
model and scale s gives s·S (checked on the surface function), the sweep's change flags against plain HF greedy
decoding, the asymmetry measures against naive loops over the control net and over S(q, k) vs S(k, q) sampled
surface by surface, and bad input (one line, exit 2, before the model loads)."""

import json
import math

import torch

from geosteer import manifold
from geosteer.interventions import steer
from geosteer.manifold.strength import interpolate_scale, scaled, strength_sweep
from geosteer_paper.manifold.asymmetry import asymmetry_by_layer, surface_asymmetry
from tests.cli_helpers import refused_before_load, run_cli


def _bank(model, seed: int = 0, amp: float = 0.5):
    bank = manifold.install(model, grid_size=4, grid_range=(-2.0, 2.0))
    manifold.uninstall(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        bank.coefficients.copy_(amp * torch.randn(bank.coefficients.shape, generator=g))
    return bank


def test_scale_zero_is_stock_and_scale_s_gives_s_times_S(tiny_model):
    model, _ = tiny_model("llama")
    bank = _bank(model)
    ids = torch.tensor([[1, 4, 9, 3, 7, 2]])
    with torch.no_grad():
        stock = model(ids).logits
        with steer(model, scaled(bank, 0.0)):
            zero = model(ids).logits
        with steer(model, bank):
            full = model(ids).logits
        with steer(model, scaled(bank, 1.0)):
            one = model(ids).logits
    assert torch.equal(zero, stock) and torch.equal(one, full)
    q, k = torch.meshgrid(torch.linspace(-2.5, 2.5, 9), torch.linspace(-2.5, 2.5, 9), indexing="ij")
    half = scaled(bank, 0.5)
    for layer, h, d in [(0, 0, 0), (2, 3, 11)]:
        assert torch.allclose(half.surface(layer, h, d, q, k), 0.5 * bank.surface(layer, h, d, q, k), atol=1e-6)
    assert bank.coefficients.abs().sum() > 0 and len(half.history) == len(bank.history) + 1


def _hf_greedy(model, ids, n, *interventions):
    with torch.no_grad(), steer(model, *interventions):
        return model.generate(ids, max_new_tokens=n, do_sample=False, pad_token_id=0)[0, ids.shape[1]:].tolist()


def test_sweep_flags_match_plain_greedy(tiny_model):
    model, tok = tiny_model("llama")
    bank = _bank(model, seed=1, amp=2.0)
    prompts = ["The cat sat on", "Paris is the", "One two three"]
    rows, summary = strength_sweep(model, tok, bank, prompts, [0.05, 1.0], max_new_tokens=4)
    assert [r["scale"] for r in rows] == [0.05] * 3 + [1.0] * 3
    for r in rows:
        ids = tok(r["prompt"], return_tensors="pt").input_ids
        changed = _hf_greedy(model, ids, 4) != _hf_greedy(model, ids, 4, scaled(bank, r["scale"]))
        assert r["greedy_changed"] == changed
    for s in (0.05, 1.0):
        flags = [r["greedy_changed"] for r in rows if r["scale"] == s]
        row = next(x for x in summary if x["scale"] == s and x["category"] == "all")
        assert row["greedy_change_rate"] == sum(flags) / 3
    kl = {s: next(x for x in summary if x["scale"] == s and x["category"] == "all")["mean_kl"] for s in (0.05, 1.0)}
    assert kl[0.05] < kl[1.0]


def test_interpolate_scale():
    summary = [{"scale": 0.5, "category": "all", "greedy_change_rate": 0.4},
               {"scale": 1.0, "category": "all", "greedy_change_rate": 0.9},
               {"scale": 1.0, "category": "code", "greedy_change_rate": 0.0}]
    assert math.isclose(interpolate_scale(summary, 0.2), 0.25)
    assert math.isclose(interpolate_scale(summary, 0.65), 0.75)
    assert interpolate_scale(summary, 0.95) is None


def test_asymmetry_against_naive_loops(tiny_model):
    model, _ = tiny_model("llama")
    bank = _bank(model, seed=2)
    c = bank.coefficients.detach().double()
    with torch.no_grad():  # layer 0: symmetric nets, layer 1: antisymmetric, layer 2: as drawn
        bank.coefficients[0] = (c[0] + c[0].transpose(-1, -2)).float()
        bank.coefficients[1] = (c[1] - c[1].transpose(-1, -2)).float()
    m = surface_asymmetry(bank, samples=9)
    assert float(m["coef"][0].abs().max()) < 1e-6 and float(m["sampled"][0].abs().max()) < 1e-6
    assert torch.allclose(m["coef"][1], torch.ones_like(m["coef"][1]), atol=1e-6)
    cc = bank.coefficients[2].detach().double()
    K = cc.shape[-1]
    for h, d in [(0, 0), (3, 7)]:
        num = sum((float(cc[h, d, a, b]) - float(cc[h, d, b, a])) ** 2 for a in range(K) for b in range(K))
        den = sum(float(cc[h, d, a, b]) ** 2 for a in range(K) for b in range(K))
        assert math.isclose(float(m["coef"][2, h, d]), math.sqrt(num) / (2 * math.sqrt(den)), rel_tol=1e-9)
        grid = torch.linspace(-2.0, 2.0, 9)
        s = torch.tensor([[float(bank.surface(2, h, d, qv.clone(), kv.clone())) for kv in grid]
                          for qv in grid], dtype=torch.float64)  # S(q_u, k_v), one point at a time
        want = (s - s.T).norm() / (2 * s.norm())
        assert math.isclose(float(m["sampled"][2, h, d]), float(want), rel_tol=1e-4)
    rows = asymmetry_by_layer(bank, samples=9)
    assert [r["layer"] for r in rows] == [0, 1, 2] and rows[0]["coef_mean"] < 1e-6
    assert math.isclose(rows[2]["coef_mean"], float(m["coef"][2].mean()), rel_tol=1e-12)


def test_cli_asymmetry_and_refusals(tmp_path, tiny_model, monkeypatch, capsys):
    model, _ = tiny_model("llama")
    folder = manifold.save(_bank(model, seed=3), tmp_path / "surf")
    out = tmp_path / "asym.json"
    code, _, err = run_cli(monkeypatch, capsys, "study", "manifold", "asymmetry", "--surfaces", str(folder),
                           "--samples", "9", "--out", str(out))
    assert code == 0, err
    doc = json.loads(out.read_text())
    assert len(doc["rows"]) == 3 and doc["meta"]["command"].startswith("geosteer study manifold asymmetry")
    for bad in ("0,0.5", "a,b", "0.5,0.5"):
        line = refused_before_load(monkeypatch, capsys, "study", "manifold", "strength", "--surfaces", str(folder),
                                   "--scales", bad, "--out", str(tmp_path / "s.json"))
        assert "--scales" in line
    assert not (tmp_path / "s.json").exists()
