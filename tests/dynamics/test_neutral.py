"""Neutral settings reproduce the stock logits on every tiny family; parallel blocks are a no-op on NeoX."""

import pytest
import torch

from geosteer import anatomy
from geosteer.dynamics.diagnostics import DiagnosticsCollector
from geosteer.dynamics.gates import FFNGates
from geosteer.dynamics.parallel import ConcurrentParallel
from geosteer.dynamics.topk import TopKAttention
from geosteer.dynamics.variants import FFNVariant, Gains, Parallelize
from geosteer.interventions import steer
from tests.conftest import TINY_FAMILIES, sample_ids


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_neutral_settings_give_stock_logits(family, tiny_model):
    model, tok = tiny_model(family)
    ids = sample_ids(tok)
    with torch.no_grad():
        stock = model(ids).logits
        neutral = [FFNVariant("full"), Gains(1.0, 1.0), FFNGates.for_model(model), Parallelize([]),
                   DiagnosticsCollector()]
        for iv in neutral:
            with steer(model, iv):
                out = model(ids).logits
            assert torch.equal(out, stock), f"{type(iv).__name__} is not neutral on {family}"
        with steer(model, *neutral):
            assert torch.equal(model(ids).logits, stock)
        # top-k with k >= sequence length keeps every weight: equal up to summation order.
        with steer(model, TopKAttention(ids.shape[1])):
            torch.testing.assert_close(model(ids).logits, stock, atol=1e-4, rtol=1e-4)
        all_layers = list(range(anatomy(model).n_layers))
        with steer(model, Parallelize(all_layers)):
            par = model(ids).logits
        with steer(model, ConcurrentParallel(all_layers)):
            conc = model(ids).logits
        assert torch.equal(par, conc)
        if anatomy(model).parallel_residual:
            assert torch.equal(par, stock), "parallelising an already parallel block must be a no-op"
        else:
            assert not torch.allclose(par, stock, atol=1e-4), "parallelising a sequential block had no effect"
        assert torch.equal(model(ids).logits, stock), "interventions were not removed cleanly"
