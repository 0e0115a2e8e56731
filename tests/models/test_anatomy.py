import pytest
from torch import nn

from geosteer import anatomy
from geosteer.errors import UnsupportedArchitecture
from geosteer.models.anatomy import FAMILIES, supported_families
from tests.conftest import TINY_FAMILIES


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_anatomy_matches_config_and_modules(tiny_model, family):
    model, _ = tiny_model(family)
    an = anatomy(model)
    cfg = model.config
    assert an.n_layers == getattr(cfg, "num_hidden_layers", getattr(cfg, "n_layer", None))
    assert an.n_heads * an.head_dim == an.blocks[0].attn.o_proj.in_features if hasattr(
        an.blocks[0].attn, "o_proj") else True
    assert an.n_heads % an.n_kv_heads == 0
    assert an.parallel_residual == (family == "gpt_neox")
    for b in an.blocks:
        assert isinstance(b.attn, nn.Module) and isinstance(b.mlp, nn.Module)
        assert b.attn.layer_idx == b.index
    # the attention-update module must be (or contain) the attention module for plain families
    if family == "gemma3":
        assert an.blocks[0].attn_update is not an.blocks[0].attn
    else:
        assert an.blocks[0].attn_update is an.blocks[0].attn


def test_gqa_and_sliding_windows(tiny_model):
    an = anatomy(tiny_model("llama")[0])
    assert (an.n_heads, an.n_kv_heads, an.n_rep) == (4, 2, 2)
    assert [an.kv_head_of(h) for h in range(4)] == [0, 0, 1, 1]
    g = anatomy(tiny_model("gemma3")[0])
    assert [b.sliding_window for b in g.blocks] == [8, 8, None]


def test_unsupported_architecture_names_it_and_lists_supported():
    class Fake(nn.Module):
        class config:  # noqa: N801
            model_type = "bert"

    with pytest.raises(UnsupportedArchitecture) as e:
        anatomy(Fake())
    msg = str(e.value)
    assert "bert" in msg and "llama" in msg and "gpt_neox" in msg
    assert set(TINY_FAMILIES) - {"gemma3"} <= set(supported_families())
    assert "gemma3_text" in FAMILIES


def test_layer_range_check(tiny_model):
    an = anatomy(tiny_model("llama")[0])
    assert an.check_layers(None) == [0, 1, 2]
    with pytest.raises(ValueError, match=r"0\.\.2"):
        an.check_layers([3])
