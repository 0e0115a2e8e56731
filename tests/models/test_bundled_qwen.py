"""Smoke tests on the real Qwen2.5-Coder-0.5B-Instruct weights (``qwen2.5-0.5b``, part of the dev set-up;
skipped when its chunk packages are absent): geosteer's attention equals stock SDPA, every registered method's
neutral setting gives the stock logits, surfaces equal the per-pair reference, and KV-cache decoding equals a
full recomputation. One fp32 model for the module, short inputs."""

from __future__ import annotations

import pytest
import torch

from geosteer import manifold
from geosteer.attention import ATTN_NAME
from geosteer.interventions import steer
from geosteer.methods import methods
from geosteer.models import loading
from geosteer.models.anatomy import anatomy
from geosteer.recipe import InterventionSpec

NAME = "qwen2.5-0.5b"
TEXTS = ["The theory of relativity states that the laws of physics are the same for all observers.",
         "She saw the man with the telescope."]


@pytest.fixture(scope="module")
def qwen():
    if not loading._bundled_here(NAME):
        pytest.skip(f"{NAME}'s chunk packages are not installed: make qwen-0.5b")
    return loading.load_model(NAME, dtype=torch.float32)


def _logits(model, *ivs, **enc) -> torch.Tensor:
    with torch.no_grad(), steer(model, *ivs):
        return model(**enc).logits


def _random_bank(model, seed: int, scale: float, **kw):
    bank = manifold.install(model, **kw)
    with torch.no_grad():
        bank.coefficients.copy_(torch.randn(bank.coefficients.shape, generator=torch.Generator().manual_seed(seed))
                                * scale)
    return bank


@pytest.mark.real
def test_shape_and_geosteer_attention_equals_stock_sdpa(qwen):
    model, tok = qwen
    an = anatomy(model)
    assert type(model).__name__ == "Qwen2ForCausalLM" and model.config._geosteer_name == NAME
    assert (an.n_layers, an.d_model, an.n_heads, an.n_kv_heads, an.head_dim) == (24, 896, 14, 2, 64)
    enc = tok(TEXTS[:1], return_tensors="pt")
    ours = _logits(model, **enc)
    model.set_attn_implementation("sdpa")
    try:
        stock = _logits(model, **enc)
    finally:
        model.set_attn_implementation(ATTN_NAME)
    assert torch.equal(ours, stock)
    top = tok.decode(ours[0, -1].argmax())
    assert ours[0, -1].softmax(-1).max() > 0.1, top  # real weights: a confident next token, not noise


@pytest.mark.real
def test_every_registered_method_is_neutral_on_the_real_weights(qwen, tmp_path):
    model, tok = qwen
    enc = tok(TEXTS[:1], return_tensors="pt")
    stock = _logits(model, **enc)
    assert methods(), "no method is registered"
    for name, method in methods().items():
        if method.examples is None:
            continue
        folder = tmp_path / name
        folder.mkdir()
        spec = InterventionSpec(**method.examples(model, folder)["neutral"])
        assert spec.build(model), f"{name}: the neutral example attaches nothing"
        out = _logits(model, spec, **enc)
        err = (out - stock).abs().max().item()
        assert err <= 1e-5, f"{name}: neutral setting moved the logits by {err:.2e}"
        assert torch.equal(_logits(model, **enc), stock), f"{name}: not removed cleanly"


@pytest.mark.real
def test_surfaces_equal_the_per_pair_reference(qwen):
    from geosteer_paper.reproduction.references import per_pair_handlers

    model, tok = qwen
    enc = tok(TEXTS, return_tensors="pt", padding=True)
    keep = enc.attention_mask.bool()
    _random_bank(model, seed=0, scale=0.05, layers=[0, 11, 23])
    try:
        ours = _logits(model, **enc)
        bank = manifold.uninstall(model)
        removers = per_pair_handlers(model, bank)
        try:
            ref = _logits(model, **enc)
        finally:
            for r in removers:
                r()
    finally:
        manifold.uninstall(model)
    stock = _logits(model, **enc)
    assert (ours - ref)[keep].abs().max().item() <= 5e-4
    assert (ours - stock)[keep].abs().max().item() > 0.1  # the surfaces do something


@pytest.mark.real
def test_kv_cache_decoding_equals_full_recompute(qwen):
    model, tok = qwen
    ids = tok(TEXTS[:1], return_tensors="pt").input_ids
    n0, new = ids.shape[1], 16
    for surfaces in (False, True):
        bank = _random_bank(model, seed=1, scale=0.05) if surfaces else None
        try:
            with torch.no_grad():
                gen = model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False, use_cache=True,
                                     output_logits=True, return_dict_in_generate=True,
                                     pad_token_id=tok.pad_token_id)
                full = model(gen.sequences, use_cache=False).logits
            assert bank is None or bank._caches  # the surfaces reused cached key features
        finally:
            manifold.uninstall(model)
        step = torch.stack(gen.logits, 1)[0]
        assert step.shape[0] == new
        err = (step - full[0, n0 - 1 : n0 - 1 + new]).abs().max().item()
        assert err <= 5e-4, f"surfaces={surfaces}: cached decoding differs from recomputation by {err:.2e}"
