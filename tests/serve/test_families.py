"""The served-family table: every row plans recipes on its family's model; others are refused. No vLLM."""

from __future__ import annotations

import pytest

from geosteer.errors import GeosteerError
from geosteer.models.anatomy import FAMILIES
from geosteer_vllm.families import SERVED_FAMILIES, served_family


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3", "mistral", "gemma3"])
def test_every_served_family_plans_surfaces_and_walls(family, tmp_path):
    from geosteer.manifold.walls import Wall
    from geosteer.models.loading import load_model
    from geosteer_vllm.plan import meta_model, plan_recipe
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


def test_qwen2_with_sliding_windows_on_some_layers_is_refused_before_the_engine(tmp_path):
    import geosteer.cli  # noqa: F401  (the CLI package registers geosteer_vllm.cli's verb)
    from geosteer.models.tiny import tiny_config
    from geosteer_vllm.cli import vllm_argv
    from geosteer_vllm.engine import engine_args

    cfg = tiny_config("qwen2", vocab_size=64)  # layer 0 full attention, layers 1-2 sliding (as HF builds it)
    assert len(set(cfg.layer_types)) > 1
    cfg.save_pretrained(tmp_path / "mixed")
    words = r"is a Qwen2 with sliding-window attention on layers \[1, 2\] of 3; vLLM's Qwen2 takes"
    with pytest.raises(GeosteerError, match=words):
        engine_args(str(tmp_path / "mixed"))
    with pytest.raises(GeosteerError, match=words):
        vllm_argv(str(tmp_path / "mixed"), {}, "127.0.0.1", 8000, 0.15, [])
    cfg.use_sliding_window, cfg.layer_types = False, ["full_attention"] * cfg.num_hidden_layers
    cfg.save_pretrained(tmp_path / "full")
    assert engine_args(str(tmp_path / "full"))["model"] == str((tmp_path / "full").resolve())
