"""The strength keys of the learned objects (``surfaces_strength``, ``gates_strength``,
``scale_learned_strength``) served: the operations of the object at strength s, against the formulas by hand;
strength 0 serves nothing; what cannot be served at a strength is refused in one line. Runs without vLLM."""

from __future__ import annotations

import pytest
import torch

from geosteer.errors import GeosteerError
from geosteer.recipe import InterventionSpec, save_recipe
from geosteer_vllm.inline import Policy, canonical, plan_inline
from geosteer_vllm.plan import plan_recipe


def _recipe(tmp_path, name: str, **keys):
    return save_recipe(tmp_path / name, InterventionSpec(**keys), base_model="tiny-llama")


def _gates(model, folder):
    from geosteer.dynamics import FFNGates

    gates = FFNGates.for_model(model, layers=[0, 2])
    with torch.no_grad():
        gates.alpha.copy_(torch.tensor([0.4, 1.8]))
    return str(gates.save(folder))


def test_gates_at_a_strength_serve_the_gates_moved_from_1(tmp_path, meta):
    model, m = meta
    folder = _gates(model, tmp_path / "g")
    plan = plan_recipe("g", _recipe(tmp_path, "r", gates=folder, gates_strength=0.5), m)
    assert sorted(plan.layers) == [0, 2]
    t = torch.randn(4, model.config.hidden_size)
    for layer, alpha in ((0, 0.4), (2, 1.8)):
        (fn,) = plan.layers[layer].mlp_out
        torch.testing.assert_close(fn(t, {}, None), t * (1 + 0.5 * (alpha - 1)))
        assert fn.form.s_par == pytest.approx(1 + 0.5 * (alpha - 1))
    assert plan_recipe("z", _recipe(tmp_path, "z", gates=folder, gates_strength=0.0), m).neutral
    inline = plan_inline(canonical({"gates": "g", "gates_strength": 2}, Policy(artifacts={"g": folder})), m)
    (fn,) = inline.layers[2].mlp_out
    torch.testing.assert_close(fn(t, {}, None), t * (1 + 2 * (1.8 - 1)))


def test_learned_scales_at_a_strength_serve_the_interpolated_scales(tmp_path, meta):
    from geosteer.directional.learned import LearnedScales
    from geosteer.directional.scales_artifact import save_scales

    model, m = meta
    folder = save_scales(LearnedScales("attn_out", [1], [0.5], [1.4]), tmp_path / "sc", base_model="tiny-llama")
    plan = plan_recipe("s", _recipe(tmp_path, "r", scale_learned=str(folder), scale_learned_strength=0.5), m)
    (fn,) = plan.layers[1].attn_out
    a, x = torch.randn(5, model.config.hidden_size), torch.randn(5, model.config.hidden_size)
    par = (a * x).sum(-1, keepdim=True) / (x * x).sum(-1, keepdim=True) * x  # a∥ by hand
    torch.testing.assert_close(fn(a, {"resid_pre": x}, None), 0.75 * par + 1.2 * (a - par))
    assert (fn.form.s_par, fn.form.s_perp) == pytest.approx((0.75, 1.2))
    assert plan_recipe("z", _recipe(tmp_path, "z", scale_learned=str(folder), scale_learned_strength=0), m).neutral


def _surfaces(model, folder, walls=()):
    from geosteer.manifold import ManifoldConfig, SurfaceBank

    bank = SurfaceBank(ManifoldConfig.for_model(model, grid_size=4, layers=[1]))
    with torch.no_grad():
        bank.coefficients.copy_(torch.randn(bank.coefficients.shape, generator=torch.Generator().manual_seed(0)))
    bank.set_walls(list(walls))
    return str(bank.save(folder)), bank.coefficients[0].detach().clone()


def test_surfaces_at_a_strength_serve_the_scaled_coefficients(tmp_path, meta):
    from geosteer.manifold.walls import Wall

    model, m = meta
    folder, coeff = _surfaces(model, tmp_path / "s")
    plan = plan_recipe("s", _recipe(tmp_path, "r", surfaces=folder, surfaces_strength=0.5), m)
    (op,) = plan.layers[1].attention
    torch.testing.assert_close(op.coeff, 0.5 * coeff, rtol=0, atol=0)
    assert plan_recipe("z", _recipe(tmp_path, "z", surfaces=folder, surfaces_strength=0), m).neutral
    walled, _ = _surfaces(model, tmp_path / "w", walls=[Wall(layer=1, heads=(0,), q=(0.0, 1.0))])
    with pytest.raises(GeosteerError, match=r"^surfaces_strength=0.5: these surfaces carry 1 exact wall\(s\), "
                                            r"which are on or off; give 0 or 1"):
        plan_recipe("w", _recipe(tmp_path, "rw", surfaces=walled, surfaces_strength=0.5), m)
    assert plan_recipe("w1", _recipe(tmp_path, "rw1", surfaces=walled, surfaces_strength=1), m).layers[1].attention
