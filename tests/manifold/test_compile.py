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


def _compiled_decode_vs_eager(model, backend: str, n_steps: int = 4):
    """Logits of a static-cache decode (eager prefill, ``n_steps`` steps through ``torch.compile(model,
    fullgraph=True, dynamic=False)``) and of the same decode in eager, with the compile counter."""
    import torch._dynamo as dynamo
    from torch._dynamo.testing import CompileCounterWithBackend
    from transformers import StaticCache

    from tests.conftest import random_bank, random_ids

    ids = random_ids(2, 9)
    bank = random_bank(model, grid_range=(-3.0, 3.0))
    manifold.install(model, bank=bank)

    @torch.no_grad()
    def decode(step):
        cache = StaticCache(config=model.config, max_cache_len=16)
        out = model(input_ids=ids, cache=cache, use_cache=True)
        logits = [out.logits[:, -1]]
        for _ in range(n_steps):
            out = step(input_ids=logits[-1].argmax(-1, keepdim=True), cache=cache, use_cache=True)
            logits.append(out.logits[:, -1])
        return torch.stack(logits)

    try:
        eager = decode(model)
        dynamo.reset()
        counter = CompileCounterWithBackend(backend)
        ours = decode(torch.compile(model, backend=counter, fullgraph=True, dynamic=False))
        used_static = len(bank._static_caches) == len(bank.layers)
    finally:
        manifold.uninstall(model)
        dynamo.reset()
    assert used_static  # the traced steps read and wrote the preallocated feature cache
    # one graph for all steps (fullgraph: a break raises; a recompile would count a second frame)
    assert counter.frame_count == 1 and counter.op_count > 0
    return ours, eager


def test_static_cache_decode_step_traces_into_one_graph(tiny_cache):
    """The decode step that CUDA graphs capture (mode="reduce-overhead"): static shapes, the feature cache
    written in place at the KV cache's rows, the same graph for every step."""
    ours, eager = _compiled_decode_vs_eager(tiny_cache("llama")[0], "eager")
    assert (ours - eager).abs().max().item() <= 1e-4 * max(1.0, eager.abs().max().item())


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("GEOSTEER_SLOW_TESTS", "") in ("", "0"),
                    reason="inductor compiles C++ for a minute or more: GEOSTEER_SLOW_TESTS=1 runs it")
def test_inductor_static_cache_decode_equals_eager(tiny_cache):
    ours, eager = _compiled_decode_vs_eager(tiny_cache("llama")[0], "inductor")
    assert (ours - eager).abs().max().item() <= 1e-4 * max(1.0, eager.abs().max().item())
