"""A model's positions, layers and vocabulary read from its config alone (``geosteer.models.limits``), against the
built model's own config, and the one-line refusal of windows past the positions."""

from __future__ import annotations

import pytest
import torch

from geosteer.errors import GeosteerError
from geosteer.models.anatomy import anatomy
from geosteer.models.limits import check_positions, config_of, max_positions, num_layers, vocab_size
from geosteer.models.tiny import TINY_FAMILIES


@pytest.mark.parametrize("family", sorted(TINY_FAMILIES))
def test_config_without_weights_matches_the_built_model(family, tiny_model):
    model, _ = tiny_model(family)
    cfg = config_of(f"tiny-{family}")
    built = model.config
    assert max_positions(cfg) == getattr(built, "max_position_embeddings", getattr(built, "n_positions", None))
    assert num_layers(cfg) == anatomy(model).n_layers  # the blocks the built model has
    assert max_positions(model) == max_positions(cfg)  # a model or its config, the same answer
    assert vocab_size(model) == model.get_output_embeddings().weight.shape[0]


def test_config_of_a_folder_and_of_what_needs_the_model(tmp_path, tiny_model):
    model, _ = tiny_model("gpt2")
    model.config.save_pretrained(tmp_path / "m")
    assert max_positions(config_of(str(tmp_path / "m"))) == model.config.n_positions
    rows = model.get_output_embeddings().weight.shape[0]  # the token ids the built model scores
    assert vocab_size(config_of(str(tmp_path / "m"))) == vocab_size(model) == rows
    assert config_of("tiny-nosuchfamily") is None
    assert config_of(str(tmp_path / "missing.gguf")) is None
    assert config_of("no-such-org/no-such-model-xyz") is None  # not cached: the loader will say what is wrong
    (tmp_path / "empty").mkdir()
    assert config_of(str(tmp_path / "empty")) is None


def test_check_positions_refuses_one_past_the_limit():
    cfg = config_of("tiny-llama")
    limit = max_positions(cfg)
    check_positions(cfg, limit, "--seq-len")  # exactly the positions: fine
    with pytest.raises(GeosteerError, match=rf"--seq-len {limit + 1} is longer than the model's {limit} positions"):
        check_positions(cfg, limit + 1, "--seq-len")
    check_positions(None, 10**9, "--seq-len")  # no config: nothing to check against


def _window_consumers():
    from geosteer.dynamics.diagnostics import diagnose
    from geosteer.dynamics.parallel import defect_profile
    from geosteer.dynamics.topk import topk_study
    from geosteer_paper.directional.mlp_internal import mlp_internal_study
    from geosteer_paper.directional.views import applied_strength, diagonal_study, head_localisation
    from geosteer_paper.dynamics.commutator import reorder_study
    from geosteer_paper.dynamics.critical import token_states

    return {"diagnose": diagnose, "defect_profile": defect_profile, "topk_study": topk_study,
            "reorder_study": reorder_study, "token_states": lambda m, ids: token_states(m, ids, 0),
            "diagonal_study": diagonal_study, "head_localisation": head_localisation,
            "applied_strength": applied_strength, "mlp_internal_study": mlp_internal_study}


@pytest.mark.parametrize("name", sorted(_window_consumers()))
def test_library_window_consumers_refuse_windows_past_the_positions(tiny_model, name):
    """GPT-2's learned positions gave IndexError tracebacks; RoPE models ran silently past them."""
    model, _ = tiny_model("gpt2")
    limit = max_positions(model)
    ids = torch.zeros(1, limit + 1, dtype=torch.long)
    with pytest.raises(GeosteerError, match=rf"window length {limit + 1} is longer than the model's {limit}"):
        _window_consumers()[name](model, ids)
