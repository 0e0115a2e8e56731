"""Surfaces under torch.compile: with a bank attached, the registered attention function traces into one
graph (``fullgraph=True``: a graph break raises; the graphs are counted), and the compiled model gives the
eager model's logits: through Dynamo's graph alone (fast), and through inductor's CPU code (slow marker:
inductor's C++ code generation takes minutes on two cores)."""

import os

import pytest
import torch

from geosteer import manifold


def _compiled_vs_eager(model, backend: str):
    import torch._dynamo as dynamo
    from torch._dynamo.testing import CompileCounterWithBackend

    ids = torch.randint(5, 900, (2, 12), generator=torch.Generator().manual_seed(0))
    bank = manifold.install(model, grid_range=(-3.0, 3.0))
    try:
        with torch.no_grad():
            stock = model(input_ids=ids, use_cache=False).logits
            g = torch.Generator().manual_seed(1)
            bank.coefficients.copy_(torch.randn(bank.coefficients.shape, generator=g) * 0.5)
            eager = model(input_ids=ids, use_cache=False).logits
            dynamo.reset()
            counter = CompileCounterWithBackend(backend)
            ours = torch.compile(model, backend=counter, fullgraph=True)(input_ids=ids, use_cache=False).logits
    finally:
        manifold.uninstall(model)
        dynamo.reset()
    assert counter.frame_count == 1 and counter.op_count > 0  # one graph, no breaks
    assert (eager - stock).abs().max().item() > 1e-3  # the surfaces change the logits
    return ours, eager


def test_surfaces_trace_into_one_graph(tiny_cache):
    ours, eager = _compiled_vs_eager(tiny_cache("llama")[0], "eager")
    # the traced graph takes the PyTorch path (the eager run: the compiled CPU kernels): fp32 rounding apart
    assert (ours - eager).abs().max().item() <= 1e-4 * max(1.0, eager.abs().max().item())


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("GEOSTEER_SLOW_TESTS", "") in ("", "0"),
                    reason="inductor compiles C++ for a minute or more: GEOSTEER_SLOW_TESTS=1 runs it")
def test_inductor_compiled_surfaces_equal_eager(tiny_cache):
    ours, eager = _compiled_vs_eager(tiny_cache("llama")[0], "inductor")
    # inductor reorders fp32 sums: a tolerance above the rounding of logits of magnitude ~|eager|
    assert (ours - eager).abs().max().item() <= 1e-4 * max(1.0, eager.abs().max().item())
