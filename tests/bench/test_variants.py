"""The variants of the learned surfaces: neutral at strength 0, acting at 1, the model left as it was; the
rank-r variant's surfaces have rank at most r (an SVD of the learned coefficients); the trainable parameter
counts are what each parametrisation has."""

from __future__ import annotations

import torch

from geosteer.bench.catalog import levers, parse_levers
from geosteer.bench.levers_variants import third_layers
from geosteer.models.anatomy import anatomy
from tests.bench.test_levers import _logits, _setup

VARIANTS = ("surfaces-rank1", "surfaces-rank2", "surfaces-layers", "surfaces+vector", "surfaces-kl")


def _coefficients(point) -> list[torch.Tensor]:
    with point.interventions() as ivs:
        return [iv.coefficients.detach().clone() for iv in ivs if hasattr(iv, "coefficients")]


def test_variants_are_neutral_at_0_act_at_1_and_count_their_parameters(tiny_model, concept_file, tmp_path):
    model, tok = tiny_model("llama")
    an = anatomy(model)
    stock = _logits(model)
    s = _setup(model, tok, concept_file, tmp_path)
    assert parse_levers(",".join(VARIANTS)) == list(VARIANTS)
    K, per_layer = 4 + 3, an.n_heads * an.head_dim
    for name in VARIANTS:
        prepared = levers()[name].build(s)
        try:
            for p in prepared.points:
                with p.interventions() as ivs:
                    got = _logits(model, ivs)
                if p.strength == 0.0:
                    torch.testing.assert_close(got, stock, atol=2e-5, rtol=0, msg=f"{name} at strength 0")
            full = [p for p in prepared.points if p.strength == 1.0]
            assert full, name
            for p in full:
                with p.interventions() as ivs:
                    assert (_logits(model, ivs) - stock).abs().max() > 1e-4, name
            if name.startswith("surfaces-rank"):
                r = int(name[-1])
                assert prepared.params == an.n_layers * per_layer * 2 * r * K
                c = _coefficients(full[0])[0].double()
                sv = torch.linalg.svdvals(c)  # (layers, heads, dims, K)
                assert sv[..., r:].abs().max() < 1e-6 * max(1.0, float(sv.max())), name
                assert sv[..., :r].abs().max() > 0, name
            elif name == "surfaces-layers":
                thirds = third_layers(an.n_layers)
                assert {p.params["layers"] for p in prepared.points} == {f"{v[0]}-{v[-1]}" for v in thirds.values()}
                assert prepared.params == max(len(v) for v in thirds.values()) * per_layer * K * K
            elif name == "surfaces+vector":
                assert prepared.params == an.n_layers * per_layer * K * K + an.d_model
            else:
                assert prepared.params == an.n_layers * per_layer * K * K
        finally:
            prepared.cleanup()
        torch.testing.assert_close(_logits(model), stock, atol=0, rtol=0, msg=f"{name} left the model changed")


def test_thirds_cover_every_layer_once():
    for n in (1, 2, 3, 4, 7, 30):
        parts = third_layers(n)
        assert sorted(x for v in parts.values() for x in v) == list(range(n))
