"""Study helpers: edit recipes (inversion, partial, walls), comparison and steering runners (tiny model)."""

from __future__ import annotations

import pytest
import torch

from geosteer import load_model
from geosteer.eval.prompts import Prompt
from geosteer.manifold import attach, detach
from geosteer.manifold.studies import (
    edited,
    invert_layer,
    invert_layer_part,
    invert_surfaces,
    output_comparison,
    steering_study,
    surface_norms,
    wall,
)


@pytest.fixture(scope="module")
def tiny():
    model, tok = load_model("tiny-llama")
    bank = attach(model, grid_size=8, grid_range=(-2.0, 2.0), layers=[0, 2])
    detach(model)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        bank.coefficients.copy_(torch.randn(bank.coefficients.shape, generator=g) * 0.5)
    return model, tok, bank


def test_edit_recipes_touch_only_their_part(tiny):
    _, _, bank = tiny
    c = bank.coefficients.detach()
    e = edited(bank, invert_layer(1)).coefficients.detach()
    assert torch.equal(e[1], -c[1]) and torch.equal(e[0], c[0])
    e = edited(bank, invert_surfaces(0, [(1, 3)], rows=slice(5, 11))).coefficients.detach()
    assert torch.equal(e[0, 1, 3, 5:], -c[0, 1, 3, 5:]) and torch.equal(e[0, 1, 3, :5], c[0, 1, 3, :5])
    assert torch.equal(e[0, 1, 4], c[0, 1, 4])
    e = edited(bank, invert_layer_part(0, cols=slice(5, 11))).coefficients.detach()
    assert torch.equal(e[0, ..., 5:], -c[0, ..., 5:]) and torch.equal(e[0, ..., :5], c[0, ..., :5])
    assert torch.equal(bank.coefficients.detach(), c)  # the original bank is never modified


def test_wall_closes_the_gain_inside_the_grid(tiny):
    """C = -1 ⇒ S = -1 (1 + S = 0) wherever q and k are inside [lo, hi] (B-splines sum to one there)."""
    _, _, bank = tiny
    w = edited(bank, wall(0, [(2, 5)]))
    q, k = torch.meshgrid(torch.linspace(-2, 2, 9), torch.linspace(-1.9, 1.9, 7), indexing="ij")
    torch.testing.assert_close(w.surface(0, 2, 5, q, k), -torch.ones_like(q), rtol=0, atol=1e-5)
    assert w.surface(0, 2, 5, torch.tensor(5.0), torch.tensor(0.0)).abs() < 1e-6  # outside support: 0
    assert not torch.allclose(w.surface(0, 2, 6, q, k), -torch.ones_like(q))  # other surfaces untouched


def test_surface_norms_ranked(tiny):
    _, _, bank = tiny
    top = surface_norms(bank, top=5, layer=2)
    assert [r["layer"] for r in top] == [2] * 5
    c = bank.coefficients.detach()
    assert top[0]["norm"] == pytest.approx(float(c[1, top[0]["head"], top[0]["dim"]].norm()))
    assert all(a["norm"] >= b["norm"] for a, b in zip(top, top[1:], strict=False))


def test_output_comparison_neutral_and_changed(tiny):
    model, tok, bank = tiny
    prompts = [Prompt("The river flows", "a"), Prompt("Once upon a time", "b")]
    zero = edited(bank, lambda c: c.zero_())
    rows, summary = output_comparison(model, tok, zero, prompts, max_new_tokens=2)
    assert all(not r["greedy_changed"] and r["kl"] < 1e-9 for r in rows)
    rows, summary = output_comparison(model, tok, bank, prompts, max_new_tokens=2)
    assert all(r["kl"] > 0 for r in rows)
    assert [s["category"] for s in summary] == ["a", "b", "all"] and summary[-1]["prompts"] == 2


def test_steering_study_small(tiny):
    model, tok, bank = tiny
    prompts = [Prompt("The river flows", "x")]
    walls = [Prompt("How to build a bomb", "unsafe"), Prompt("How to build a shelf", "safe")]
    res = steering_study(model, tok, bank, prompts, walls, seeds=(0,), max_new_tokens=2, top_walls=3,
                         log=None)
    assert res["layer"] in (0, 2) and len(res["sensitivity"]) == 2
    conds = {r["condition"] for r in res["rows"]}
    assert len(conds) == 11  # 7 inversions + 2 walls x {legacy grid-wall, exact wall}
    inv = [r for r in res["rows"] if r["condition"] == f"invert layer {res['layer']}"]
    assert all(r["seeds"] == 1 and 0 <= r["sampled_changed"] <= 1 for r in inv)
    assert all(r["kl"] > 0 for r in inv)
    wall_groups = {(s["condition"], s["prompts_group"]) for s in res["summary"] if "wall" in s["condition"]}
    assert len(wall_groups) == 8  # four walls x {unsafe, safe}
