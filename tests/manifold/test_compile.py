"""Surfaces under torch.compile: with a bank attached, the registered attention function traces into one
graph (``fullgraph=True``: a graph break raises; the graphs are counted), and the compiled model gives the
eager model's logits: through Dynamo's graph alone (fast), and through inductor's CPU code (slow marker:
inductor's C++ code generation takes minutes on two cores). The same for transformers' compiled decode step
beside a static KV cache (what CUDA graphs capture): one graph for every step, eager tokens and logits."""

import contextlib
import os

import pytest
import torch

from geosteer import manifold
from tests.conftest import random_bank, random_ids

slow_inductor = pytest.mark.skipif(os.environ.get("GEOSTEER_SLOW_TESTS", "") in ("", "0"),
                                   reason="inductor compiles C++ for a minute or more: GEOSTEER_SLOW_TESTS=1 runs it")


@contextlib.contextmanager
def _random_surfaces(model, seed: int):
    """Random surfaces (grid range ±3) installed on ``model`` and Dynamo's caches cleared; both undone after."""
    import torch._dynamo as dynamo

    bank = manifold.install(model, bank=random_bank(model, seed=seed, grid_range=(-3.0, 3.0)))
    dynamo.reset()
    try:
        yield bank
    finally:
        manifold.uninstall(model)
        dynamo.reset()


def _compiled_vs_eager(model, backend: str):
    from torch._dynamo.testing import CompileCounterWithBackend

    ids = random_ids(2, 12)
    with torch.no_grad():
        stock = model(input_ids=ids, use_cache=False).logits
        with _random_surfaces(model, seed=1):
            eager = model(input_ids=ids, use_cache=False).logits
            counter = CompileCounterWithBackend(backend)
            ours = torch.compile(model, backend=counter, fullgraph=True)(input_ids=ids, use_cache=False).logits
    assert counter.frame_count == 1 and counter.op_count > 0  # one graph, no breaks
    assert (eager - stock).abs().max().item() > 1e-3  # the surfaces change the logits
    return ours, eager


def test_surfaces_trace_into_one_graph(tiny_model):
    ours, eager = _compiled_vs_eager(tiny_model("llama")[0], "eager")
    # the traced graph takes the PyTorch path (the eager run: the compiled CPU kernels): fp32 rounding apart
    assert (ours - eager).abs().max().item() <= 1e-4 * max(1.0, eager.abs().max().item())


@pytest.mark.slow
@slow_inductor
def test_inductor_compiled_surfaces_equal_eager(tiny_model):
    ours, eager = _compiled_vs_eager(tiny_model("llama")[0], "inductor")
    # inductor reorders fp32 sums: a tolerance above the rounding of logits of magnitude ~|eager|
    assert (ours - eager).abs().max().item() <= 1e-4 * max(1.0, eager.abs().max().item())


def _compiled_generate_vs_eager(model, backend: str, mode: str | None = None):
    """Static-cache greedy generation with surfaces, eager and with transformers' own compiled decode step
    (``CompileConfig(fullgraph=True, dynamic=False)``, the step that ``mode="reduce-overhead"`` captures as a
    CUDA graph on a GPU; forced on the CPU), -> (compiled, eager) outputs and Dynamo's counters."""
    import torch._dynamo as dynamo
    from torch._dynamo.utils import counters
    from transformers import CompileConfig

    ids = random_ids(2, 9)
    kw = dict(max_new_tokens=5, min_new_tokens=5, do_sample=False, output_logits=True,
              return_dict_in_generate=True, pad_token_id=0, cache_implementation="static")
    config = CompileConfig(fullgraph=True, dynamic=False, backend=backend, mode=mode)
    config._compile_all_devices = True  # transformers compiles on accelerators only, unless told
    with torch.no_grad(), _random_surfaces(model, seed=0) as bank:
        eager = model.generate(ids, **kw)
        dynamo.reset()
        counters.clear()
        ours = model.generate(ids, compile_config=config, **kw)
        traced = {i: c.end for i, c in bank._static_caches.items()}
        stats = {k: dict(v) for k, v in counters.items()}
    # every surface layer decoded through the preallocated feature cache inside the graph (end unknown)
    assert traced == {i: None for i in range(len(bank.layers))}
    # 4 decode steps, one graph (fullgraph: a break raises), no recompile
    assert stats["stats"]["unique_graphs"] == 1 and not stats.get("graph_break")
    assert torch.equal(ours.sequences, eager.sequences)
    return torch.stack(ours.logits), torch.stack(eager.logits)


def test_static_cache_decode_step_traces_into_one_graph(tiny_model):
    ours, eager = _compiled_generate_vs_eager(tiny_model("llama")[0], "eager")
    assert (ours - eager).abs().max().item() <= 1e-4 * max(1.0, eager.abs().max().item())


@pytest.mark.slow
@slow_inductor
def test_inductor_static_cache_decode_equals_eager(tiny_model):
    """transformers' default compiled decode (inductor, mode="reduce-overhead": CUDA graphs on a GPU, the same
    inductor graph on the CPU)."""
    ours, eager = _compiled_generate_vs_eager(tiny_model("llama")[0], "inductor", "reduce-overhead")
    assert (ours - eager).abs().max().item() <= 1e-4 * max(1.0, eager.abs().max().item())
