"""Fixtures shared by the serving tests."""

import pytest


@pytest.fixture(scope="module")
def meta():
    """tiny-llama and the plugin's meta-device view of it, as the planner sees a served model."""
    from geosteer.models.loading import load_model
    from geosteer_vllm.plan import meta_model

    model, _ = load_model("tiny-llama")
    m = meta_model(model.config)
    m.config._geosteer_name = "tiny-llama"
    return model, m
