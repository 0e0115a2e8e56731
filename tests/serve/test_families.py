"""The served-family table: every row plans recipes on its family's model; others are refused. No vLLM."""

from __future__ import annotations

import pytest

from geosteer.errors import GeosteerError
from geosteer.models.anatomy import FAMILIES
from geosteer.serve.families import SERVED_FAMILIES, served_family


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3", "mistral", "gemma3"])
def test_every_served_family_plans_surfaces_and_walls(family, tmp_path):
    from geosteer.manifold.walls import Wall
    from geosteer.models.loading import load_model
    from geosteer.serve.plan import meta_model, plan_recipe
    from tests.serve.helpers import random_surfaces

    model, _ = load_model(f"tiny-{family}")
    assert model.config.model_type in SERVED_FAMILIES and model.config.model_type in FAMILIES
    meta = meta_model(model.config)
    meta.config._geosteer_name = f"tiny-{family}"
    walls = [Wall(layer=0, heads=(3,), k=(0.0, float("inf")))]
    plan = plan_recipe("w", random_surfaces(model, tmp_path / "w", layers=(0,), walls=walls), meta)
    (wall, surface) = plan.layers[0].attention
    rep = model.config.num_attention_heads // model.config.num_key_value_heads
    assert wall.rep == rep and wall.heads.unique().tolist() == [3] and surface.coeff.shape[0] == 4


def test_other_families_are_refused_naming_the_served_ones():
    assert len({f.architecture for f in SERVED_FAMILIES.values()}) == len(SERVED_FAMILIES)
    with pytest.raises(GeosteerError, match="supports the llama, qwen2, qwen3, mistral, gemma3_text families; "
                                            "'m' is 'gpt_neox'"):
        served_family("gpt_neox", "'m'")
