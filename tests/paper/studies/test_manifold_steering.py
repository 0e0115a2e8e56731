"""paper/studies/manifold/steering.py: its edits (Edit mini-language) equal the hand-written coefficient edits
they replaced, the sensitivity, comparison, steering and wall studies on a tiny model, and the runner."""

from __future__ import annotations

import copy
import csv
import json

import pytest
import torch

from geosteer import load_model
from geosteer.eval.compare import kl_divergence, next_token_logprobs
from geosteer.eval.prompts import Prompt
from geosteer.manifold import save
from geosteer.manifold.edit import live
from geosteer.manifold.explore import top_surfaces
from geosteer.manifold.walls import Wall
from studies.manifold.steering import (
    inversions,
    main,
    output_comparison,
    sensitivity,
    steering_study,
    wall_edits,
    wall_study,
)
from tests.manifold.test_walls import _bank


@pytest.fixture(scope="module")
def tiny():
    model, tok = load_model("tiny-llama")
    return model, tok, _bank(model, grid_range=(-2.0, 2.0), grid_size=8, layers=[0, 2])


def _edited(bank, edit) -> torch.Tensor:
    with live(bank, edit):
        return bank.coefficients.detach().clone()


def test_inversions_equal_the_hand_written_coefficient_edits(tiny):
    """Each Edit of the steering study changes exactly what the study's former lambdas changed (on a copy of
    the coefficients, indexed by slot): the layer, one surface, half of its rows/columns, half of the
    layer's rows/columns; the bank comes back unchanged."""
    _, _, bank = tiny
    c = bank.coefficients.detach().clone()
    K = bank.K
    assert K == 11
    s = bank.slot(2)
    lo, hi = slice(0, 5), slice(5, 11)
    refs = []
    for fn in (lambda x: x[s].mul_(-1),
               lambda x: x[s, 1, 3].mul_(-1),
               lambda x: x[s, 1, 3, hi, :].mul_(-1),
               lambda x: x[s, 1, 3, lo, :].mul_(-1),
               lambda x: x[s, 1, 3, :, hi].mul_(-1),
               lambda x: x[s, :, :, hi, :].mul_(-1),
               lambda x: x[s, :, :, :, hi].mul_(-1)):
        ref = c.clone()
        fn(ref)
        refs.append(ref)
    conds = inversions(2, 1, 3, K)
    assert [name for name, _, _ in conds] == [
        "invert layer 2", "invert surface L2 h1 d3", "invert surface L2 h1 d3 rows 5-10",
        "invert surface L2 h1 d3 rows 0-4", "invert surface L2 h1 d3 cols 5-10", "invert layer 2 rows 5-10",
        "invert layer 2 cols 5-10"]
    assert [sample for _, _, sample in conds] == [True, True, False, False, False, False, False]
    for (name, edit, _), ref in zip(conds, refs, strict=True):
        assert torch.equal(_edited(bank, edit), ref), name
    assert torch.equal(bank.coefficients.detach(), c) and bank.history == [] and bank.walls == []


def test_walls_equal_the_former_grid_walls_and_exact_walls(tiny):
    """grid-wall = C := -1 on the layer / on its top-N norm surfaces (the former lambdas); the exact walls are
    ``Wall(layer)`` and ``Wall(layer, pairs=top-N)`` as the former ``exact_wall`` built them."""
    _, _, bank = tiny
    c = bank.coefficients.detach().clone()
    s = bank.slot(0)
    top = [(r["head"], r["dim"]) for r in top_surfaces(bank, 3, layers=[0])]
    ref_layer = c.clone()
    ref_layer[s].fill_(-1.0)
    ref_top = c.clone()
    for h, d in top:
        ref_top[s, h, d].fill_(-1.0)
    (n1, e1), (n2, e2), (n3, e3), (n4, e4) = wall_edits(0, 3)
    assert (n1, n2, n3, n4) == ("grid-wall layer 0", "grid-wall top-3 surfaces of layer 0", "exact wall layer 0",
                                "exact wall top-3 surfaces of layer 0")
    assert torch.equal(_edited(bank, e1), ref_layer) and torch.equal(_edited(bank, e2), ref_top)
    H, D = bank.n_heads, bank.head_dim
    for edit, ref in ((e3, Wall(layer=0)), (e4, Wall(layer=0, pairs=tuple(top)))):
        with live(bank, edit):
            assert torch.equal(bank.coefficients.detach(), c)
            (w,) = bank.walls
            assert (w.layer, w.q, w.k) == (ref.layer, ref.q, ref.k)
            assert set(w.resolved_pairs(H, D)) == set(ref.resolved_pairs(H, D))
    assert bank.walls == [] and bank.history == []


def test_grid_wall_closes_the_gain_inside_the_grid(tiny):
    """C = -1 ⇒ S = -1 (1 + S = 0) wherever q and k are inside [lo, hi] (B-splines sum to one there)."""
    from geosteer.manifold.edit import grid_wall

    _, _, bank = tiny
    q, k = torch.meshgrid(torch.linspace(-2, 2, 9), torch.linspace(-1.9, 1.9, 7), indexing="ij")
    with live(bank, grid_wall(layers=[0], heads=[2], dims=[5])):
        torch.testing.assert_close(bank.surface(0, 2, 5, q, k), -torch.ones_like(q), rtol=0, atol=1e-5)
        assert bank.surface(0, 2, 5, torch.tensor(5.0), torch.tensor(0.0)).abs() < 1e-6  # outside support: 0
        assert not torch.allclose(bank.surface(0, 2, 6, q, k), -torch.ones_like(q))  # other surfaces untouched


def test_sensitivity_is_next_token_kl_to_a_zeroed_copy(tiny):
    """Per layer in bank order: KL(full bank ‖ layer zeroed) against copies zeroed by hand, and ‖C_layer‖_F."""
    model, tok, bank = tiny
    texts = ["The river flows", "Once upon a time"]
    rows = sensitivity(model, tok, bank, texts)
    assert [r["layer"] for r in rows] == [0, 2]
    for slot, r in enumerate(rows):
        z = copy.deepcopy(bank)
        with torch.no_grad():
            z.coefficients[slot].zero_()
        z.clear_cache()
        kls = [kl_divergence(next_token_logprobs(model, tok, t, [bank]), next_token_logprobs(model, tok, t, [z]))
               for t in texts]
        assert r["mean_kl"] == pytest.approx(sum(kls) / 2, rel=1e-4, abs=1e-9)
        assert r["max_kl"] == pytest.approx(max(kls), rel=1e-4, abs=1e-9)
        assert r["layer_norm"] == pytest.approx(float(bank.coefficients[slot].detach().norm()), rel=1e-6)


def test_output_comparison_neutral_and_changed(tiny):
    model, tok, bank = tiny
    prompts = [Prompt("The river flows", "a"), Prompt("Once upon a time", "b")]
    zero = copy.deepcopy(bank)
    with torch.no_grad():
        zero.coefficients.zero_()
    zero.clear_cache()
    rows, summary = output_comparison(model, tok, zero, prompts, max_new_tokens=2)
    assert all(not r["greedy_changed"] and r["kl"] < 1e-9 for r in rows)
    rows, summary = output_comparison(model, tok, bank, prompts, max_new_tokens=2)
    assert all(r["kl"] > 0 for r in rows)
    assert [s["category"] for s in summary] == ["a", "b", "all"] and summary[-1]["prompts"] == 2


def test_steering_study_small(tiny):
    model, tok, bank = tiny
    prompts = [Prompt("The river flows", "x")]
    walls = [Prompt("How to build a bomb", "unsafe"), Prompt("How to build a shelf", "safe")]
    res = steering_study(model, tok, bank, prompts, walls, seeds=(0,), max_new_tokens=2, top_walls=3, log=None)
    assert res["layer"] == max(res["sensitivity"], key=lambda r: r["mean_kl"])["layer"]
    conds = {r["condition"] for r in res["rows"]}
    assert len(conds) == 11  # 7 inversions + 2 walls x {legacy grid-wall, exact wall}
    inv = [r for r in res["rows"] if r["condition"] == f"invert layer {res['layer']}"]
    assert all(r["sample_seeds"] == 1 and 0 <= r["sampled_changed"] <= 1 for r in inv)
    assert all(r["kl"] > 0 for r in inv)
    wall_groups = {(s["condition"], s["prompts_group"]) for s in res["summary"] if "wall" in s["condition"]}
    assert len(wall_groups) == 8  # four walls x {unsafe, safe}
    assert bank.history == [] and bank.walls == []  # every edit was live


def test_wall_study_small(tiny_model):
    model, tok = tiny_model("llama")
    bank = _bank(model, grid_range=(-0.5, 0.5))
    prompts = [Prompt("How to build a bomb", "unsafe"), Prompt("How to build a shelf", "safe")]
    res = wall_study(model, tok, bank, prompts, 1, top_walls=3, max_new_tokens=2, log=None)
    leak = {r["condition"]: r["passing"] for r in res["leakage"]}
    assert leak["exact wall layer 1"] == 0 and leak["exact wall top-3 surfaces of layer 1"] == 0
    assert leak["grid-wall layer 1"] > 0.01  # most q, k lie past ±0.5: the legacy wall leaks
    assert {(s["condition"], s["prompts_group"]) for s in res["summary"]} == {
        (c, g) for c in leak for g in ("unsafe", "safe")}
    assert bank.walls == [] and bank.history == []  # the study edits live and restores


def test_runner_compare_and_walls(tiny, tmp_path, capsys):
    model, _, bank = tiny
    src = save(bank, tmp_path / "s")
    out = tmp_path / "c.json"
    main(["compare", "--surfaces", str(src), "--model", "tiny-llama", "--limit", "2", "--max-new-tokens", "2",
          "--out", str(out)])
    doc = json.loads(out.read_text())
    assert doc["meta"]["command"].startswith("python paper/studies/manifold/steering.py compare --surfaces ")
    assert len(doc["rows"]) == 2 and doc["meta"]["summary"][-1] == {"category": "all", **{
        k: doc["meta"]["summary"][-1][k] for k in ("prompts", "greedy_change_rate", "mean_kl")}}
    with open(out.with_suffix(".summary.csv")) as f:
        assert [r["category"] for r in csv.DictReader(f)] == [s["category"] for s in doc["meta"]["summary"]]
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(["walls", "--surfaces", str(src), "--model", "tiny-llama", "--out", str(tmp_path / "w.json")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.strip().splitlines() == [
        "error: the walls study needs --layer (e.g. the steer study's most sensitive layer)"]
    assert not (tmp_path / "w.json").exists()


def test_compare_resumes_a_stopped_run(tiny, tmp_path, monkeypatch, capsys):
    import studies.manifold.steering as steering

    _, _, bank = tiny
    src = save(bank, tmp_path / "s")
    args = ["compare", "--surfaces", str(src), "--model", "tiny-llama", "--limit", "12", "--max-new-tokens", "2"]
    clean = tmp_path / "clean.json"
    main([*args, "--out", str(clean)])
    assert not (tmp_path / "clean.json.partial").exists()  # a finished run leaves no partial file

    class StopsAfterOneBlock(steering.PairedComparison):
        calls = 0

        def run(self, *a, **k):
            StopsAfterOneBlock.calls += 1
            if StopsAfterOneBlock.calls > 1:
                raise KeyboardInterrupt
            return super().run(*a, **k)

    out = tmp_path / "c.json"
    monkeypatch.setattr(steering, "PairedComparison", StopsAfterOneBlock)
    with pytest.raises(KeyboardInterrupt):
        main([*args, "--out", str(out)])
    monkeypatch.undo()
    kept = json.loads((tmp_path / "c.json.partial").read_text())
    assert len(kept["rows"]) == 10 and not out.exists()
    kept["rows"][0]["text_b"] = "kept, not recomputed"
    (tmp_path / "c.json.partial").write_text(json.dumps(kept))
    main([*args, "--out", str(out)])
    rows, ref = json.loads(out.read_text())["rows"], json.loads(clean.read_text())["rows"]
    assert rows[0]["text_b"] == "kept, not recomputed" and rows[1:] == ref[1:]
    assert json.loads(out.read_text())["meta"]["resumed_prompts"] == 10
    assert not (tmp_path / "c.json.partial").exists()

    (tmp_path / "c.json.partial").write_text(json.dumps(kept))
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main([*args[:-1], "3", "--out", str(out)])  # other settings: refused in one line, nothing rewritten
    assert e.value.code == 2 and len(capsys.readouterr().err.strip().splitlines()) == 1
