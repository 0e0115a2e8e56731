"""Smoke test on the bundled default model: zero surfaces are the stock model; surfaces decode with the
KV cache exactly as a full recomputation."""

import pytest
import torch

from geosteer import manifold


@pytest.mark.real
def test_smollm2_zero_surfaces_equal_stock_and_cached_decoding(smollm2):
    model, tok = smollm2
    ids = tok("The theory of relativity states that", return_tensors="pt").input_ids
    with torch.no_grad():
        ref = model(ids).logits
    bank = manifold.install(model)
    try:
        assert bank.coefficients.shape == (30, 9, 64, 11, 11)
        with torch.no_grad():
            assert torch.equal(model(ids).logits, ref)
            g = torch.Generator().manual_seed(0)
            bank.coefficients.copy_(torch.randn(bank.coefficients.shape, generator=g) * 0.05)
            gen = model.generate(ids, max_new_tokens=4, do_sample=False, output_logits=True,
                                 return_dict_in_generate=True, pad_token_id=tok.pad_token_id)
            full = model(gen.sequences, use_cache=False).logits
        n0 = ids.shape[1]
        step = torch.stack(gen.logits, 1)[0]
        assert (step - full[0, n0 - 1 : n0 - 1 + step.shape[0]]).abs().max().item() <= 1e-3
        assert (full[0, :n0] - ref[0]).abs().max() > 1e-3  # the surfaces change the model
    finally:
        manifold.uninstall(model)
    with torch.no_grad():
        assert torch.equal(model(ids).logits, ref)
