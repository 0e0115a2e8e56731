"""The strength keys of the surfaces, the FFN gates and the learned scales (``surfaces_strength``,
``gates_strength``, ``scale_learned_strength``): the learned change × s, against computations by hand; what
they refuse. Strength 0 and 1 on every family: tests/core/test_method_contract.py."""

from __future__ import annotations

import pytest
import torch

import geosteer
from geosteer import manifold
from geosteer.directional.learned import LearnedScales
from geosteer.dynamics import FFNGates
from geosteer.errors import GeosteerError
from geosteer.interventions import steer
from geosteer.manifold.walls import Wall
from geosteer.recipe import InterventionSpec, parse_settings, save_recipe
from tests.conftest import random_bank


def _logits(model, tok, *ivs) -> torch.Tensor:
    ids = tok(["The cat sat on the mat because it was warm and"], return_tensors="pt").input_ids
    with torch.no_grad(), steer(model, *ivs):
        return model(input_ids=ids).logits


def test_surfaces_at_half_strength_are_the_surfaces_with_half_the_coefficients(tiny_model, tmp_path):
    model, tok = tiny_model("llama")
    bank = random_bank(model, seed=2, scale=0.6, grid_size=4, layers=[0, 2])
    folder = manifold.save(bank, tmp_path / "s")
    by_hand = manifold.SurfaceBank(bank.config)
    with torch.no_grad():
        by_hand.coefficients.copy_(0.5 * bank.coefficients)
    got = _logits(model, tok, InterventionSpec(surfaces=str(folder), surfaces_strength=0.5))
    torch.testing.assert_close(got, _logits(model, tok, by_hand), rtol=0, atol=0)
    assert (got - _logits(model, tok, bank)).abs().max() > 1e-4
    # the strength acts on the edited surfaces: scale=2 then strength 0.5 is the artifact itself
    spec = parse_settings([f"surfaces={folder}", "edits=scale=2", "surfaces_strength=0.5"])
    torch.testing.assert_close(_logits(model, tok, spec), _logits(model, tok, bank), rtol=0, atol=0)


def test_surfaces_with_walls_take_strength_0_or_1_only(tiny_model, tmp_path):
    from geosteer.manifold.method import at_strength

    model, tok = tiny_model("llama")
    bank = random_bank(model, seed=1, scale=0.5, grid_size=4, layers=[1])
    bank.set_walls([Wall(layer=1, heads=(0,), q=(0.0, 1.0))])
    folder = manifold.save(bank, tmp_path / "w")
    with pytest.raises(GeosteerError, match=r"^surfaces_strength=0.5: these surfaces carry 1 exact wall"):
        InterventionSpec(surfaces=str(folder), surfaces_strength=0.5).build(model)
    assert InterventionSpec(surfaces=str(folder), surfaces_strength=0).build(model) == []
    (whole,) = InterventionSpec(surfaces=str(folder), surfaces_strength=1).build(model)
    assert len(whole.walls) == 1
    off = at_strength(manifold.load(folder, model=model), 0.0)  # in place (the studio's bank): walls off too
    assert off.walls == [] and not bool(off.coefficients.ne(0).any())
    torch.testing.assert_close(_logits(model, tok, off), _logits(model, tok), rtol=0, atol=2e-5)


def _mlp_hooks(model, gains: dict[int, float]):
    """Plain torch forward hooks multiplying each listed layer's MLP output by its gain (Llama layout)."""
    return [model.model.layers[i].mlp.register_forward_hook(lambda m, a, out, g=g: out * g)
            for i, g in gains.items()]


def test_gates_at_strength_s_move_each_gate_s_of_the_way_from_1(tiny_model, tmp_path):
    model, tok = tiny_model("llama")
    gates = FFNGates.for_model(model, layers=[0, 2])
    with torch.no_grad():
        gates.alpha.copy_(torch.tensor([0.4, 1.8]))
    folder = gates.save(tmp_path / "g")
    for s in (0.5, -1.0, 2.0):
        got = _logits(model, tok, InterventionSpec(gates=str(folder), gates_strength=s))
        handles = _mlp_hooks(model, {0: 1 + s * (0.4 - 1), 2: 1 + s * (1.8 - 1)})
        try:
            want = _logits(model, tok)
        finally:
            for h in handles:
                h.remove()
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    assert gates.at_strength(1.0) is gates and torch.equal(gates.alpha, torch.tensor([0.4, 1.8]))
    torch.testing.assert_close(gates.at_strength(0.0).alpha, torch.ones(2), rtol=0, atol=0)


def test_learned_scales_at_half_strength_against_the_scales_interpolated_by_hand(tiny_model, tmp_path):
    from geosteer.directional.scales_artifact import save_scales

    model, tok = tiny_model("llama")
    for site in ("attn_out", "resid_post"):
        sc = LearnedScales(site, [0, 2], [0.5, 1.5], [1.2, 0.7])
        folder = save_scales(sc, tmp_path / site, base_model="tiny-llama")
        by_hand = LearnedScales(site, [0, 2], [0.75, 1.25], [1.1, 0.85])
        got = _logits(model, tok, InterventionSpec(scale_learned=str(folder), scale_learned_strength=0.5))
        torch.testing.assert_close(got, _logits(model, tok, by_hand), rtol=0, atol=1e-6)
        assert (got - _logits(model, tok, sc)).abs().max() > 1e-4
        zero = sc.at_strength(0.0)
        assert zero.s_par.tolist() == [1.0, 1.0] and zero.s_perp.tolist() == [1.0, 1.0]


def test_a_recipe_and_geosteer_load_keep_the_strength(tiny_model, tmp_path):
    model, tok = tiny_model("llama")
    gates = FFNGates.for_model(model)
    with torch.no_grad():
        gates.alpha.copy_(torch.linspace(0.5, 1.5, gates.alpha.numel()))
    spec = InterventionSpec(gates=str(gates.save(tmp_path / "g")), gates_strength=0.25)
    recipe = save_recipe(tmp_path / "r", spec, base_model="tiny-llama")
    torch.testing.assert_close(_logits(model, tok, geosteer.load(recipe, model=model)), _logits(model, tok, spec),
                               rtol=0, atol=0)


@pytest.mark.parametrize("key,folder", [("surfaces_strength", "surfaces"), ("gates_strength", "gates"),
                                        ("scale_learned_strength", "scale_learned")])
def test_a_strength_without_its_artifact_or_out_of_range_is_one_line(key, folder):
    with pytest.raises(GeosteerError, match=f"^{key}= needs {folder}="):
        InterventionSpec(**{key: 0.5}).validate()
    with pytest.raises(GeosteerError, match=key):
        parse_settings([f"{folder}=x", f"{key}=inf"])
    InterventionSpec(**{key: 1.0}).validate()  # the default alone is fine


def test_a_strength_that_overflows_is_refused(tiny_model, tmp_path):
    model, _ = tiny_model("llama")
    gates = FFNGates.for_model(model, layers=[0])
    with torch.no_grad():
        gates.alpha.fill_(3.0)
    with pytest.raises(GeosteerError, match=r"^gates_strength=3e\+38: the gates .* overflow float32"):
        InterventionSpec(gates=str(gates.save(tmp_path / "g")), gates_strength=3e38).build(model)
    bank = random_bank(model, seed=0, scale=4.0, grid_size=4, layers=[0])
    with pytest.raises(GeosteerError, match=r"^surfaces_strength=3e\+38: the surface of layer 0"):
        InterventionSpec(surfaces=str(manifold.save(bank, tmp_path / "s")), surfaces_strength=3e38).build(model)
