"""Quantised models through ``load_model(..., quantization_config=...)`` (issue 15): optimum-quanto int8
weights, which transformers supports on CPU (bitsandbytes needs a GPU). A tiny random model is saved to a
folder and reloaded quantised; neutral geosteer settings must reproduce that quantised model exactly, and
surfaces must attach to it and act."""

import copy

import pytest
import torch

from geosteer import manifold
from geosteer.attention import ATTN_NAME
from geosteer.interventions import Identity, steer
from geosteer.models.anatomy import anatomy
from geosteer.models.loading import load_model
from tests.conftest import random_ids

pytest.importorskip("optimum.quanto", reason="optimum-quanto is not installed (pip install optimum-quanto)")


def _ids(model, n=2, length=16, seed=0):
    return random_ids(n, length, seed, high=model.config.vocab_size)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from transformers import QuantoConfig

    folder = tmp_path_factory.mktemp("tiny-llama")
    plain, tok = load_model("tiny-llama")
    plain.save_pretrained(folder)
    tok.save_pretrained(folder)
    quant, _ = load_model(str(folder), quantization_config=QuantoConfig(weights="int8"))
    return plain, quant


def _linears(model):
    return {n: m for n, m in model.named_modules() if n.startswith("model.layers.") and hasattr(m, "weight")
            and m.weight is not None and m.weight.dim() == 2}


def test_weights_are_really_int8(models):
    from optimum.quanto import QLinear

    plain, quant = models
    qlin = _linears(quant)
    assert qlin, "no linear layers found"
    for name, mod in qlin.items():
        assert isinstance(mod, QLinear), f"{name} was not quantised: {type(mod).__name__}"
        assert mod.weight._data.dtype is torch.int8, name
    assert not any(isinstance(m, QLinear) for m in plain.modules())
    # the stored int8 weights are a rounding of the float ones: dequantised, they are close but not equal
    flin = _linears(plain)
    for name, mod in qlin.items():
        deq = mod.weight.dequantize().float()
        err = (deq - flin[name].weight).abs()
        assert 0 < err.max() <= flin[name].weight.abs().amax(dim=1, keepdim=True).max() / 127 + 1e-6, name


def test_quantised_forward_uses_the_int8_weights(models):
    """Independent reference: the float model with every quantised weight replaced by its dequantised value."""
    plain, quant = models
    ref_model = copy.deepcopy(plain)
    flin = _linears(ref_model)
    with torch.no_grad():
        for name, mod in _linears(quant).items():
            flin[name].weight.copy_(mod.weight.dequantize().float())
    ids = _ids(plain)
    with torch.no_grad():
        got = quant(ids).logits
        ref = ref_model(ids).logits
        unquant = plain(ids).logits
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)
    assert (got - unquant).abs().max() > 1e-3  # quantisation changed the output, so the check above bites


def test_neutral_settings_reproduce_the_quantised_model(models):
    _, quant = models
    assert quant.config._attn_implementation == ATTN_NAME
    ids = _ids(quant, seed=1)
    with torch.no_grad():
        ours = quant(ids).logits
        quant.set_attn_implementation("sdpa")
        try:
            stock = quant(ids).logits
        finally:
            quant.set_attn_implementation(ATTN_NAME)
        with steer(quant, Identity("attn_out"), Identity("mlp_out")):
            ident = quant(ids).logits
        manifold.install(quant, grid_size=6)  # zero surfaces
        try:
            zero = quant(ids).logits
        finally:
            manifold.uninstall(quant)
    torch.testing.assert_close(ours, stock, atol=0, rtol=0)
    torch.testing.assert_close(ident, stock, atol=0, rtol=0)
    torch.testing.assert_close(zero, stock, atol=0, rtol=0)


def test_surfaces_attach_and_act_on_the_quantised_model(models):
    plain, quant = models
    bank = manifold.install(plain, grid_size=6, grid_range=(-3.0, 3.0))
    manifold.uninstall(plain)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        bank.coefficients.copy_(torch.randn(bank.coefficients.shape, generator=g) * 0.3)
    ids = _ids(quant, seed=2)
    with torch.no_grad():
        before = quant(ids).logits
        with steer(quant, bank):
            steered = quant(ids).logits
        after = quant(ids).logits
        with steer(plain, bank):
            steered_plain = plain(ids).logits
        plain_ref = plain(ids).logits
    assert len(anatomy(quant).blocks) == len(anatomy(plain).blocks)
    assert torch.isfinite(steered).all()
    assert (steered - before).abs().max() > 1e-3  # the surfaces act
    torch.testing.assert_close(after, before, atol=0, rtol=0)  # and leave nothing behind
    # the steering effect on the quantised model is close to the effect on the float model it came from
    eff_q, eff_f = steered - before, steered_plain - plain_ref
    assert (eff_q - eff_f).abs().max() < 0.5 * eff_f.abs().max()
