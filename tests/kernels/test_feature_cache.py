"""The decode feature caches: beside transformers' static KV cache (``cache_implementation="static"``) the
surfaces decode the tokens and logits of a cache-free greedy loop (every step a full forward of the whole
sequence) on tiny families (GQA, sliding-window layers), and of the dynamic cache (padding); the rows of
the preallocated feature cache are the features of the KV cache's rows; a step that skipped the surfaces is
noticed and the features recomputed."""

import pytest
import torch
from transformers import DynamicCache, StaticCache

from geosteer import manifold
from geosteer.kernels.exact import key_features
from tests.conftest import random_bank, random_ids

FAMILIES = ["llama", "gemma3", "gpt_neox"]  # GQA; sliding-window and full layers (GQA 4:1); layer_past
N_NEW = 4


def _tol(ref: torch.Tensor) -> float:
    return 1e-5 * max(1.0, ref.abs().max().item())  # fp32 rounding of logits of this magnitude


@torch.no_grad()
def _no_cache_greedy(model, ids: torch.Tensor, n: int) -> torch.Tensor:
    """(n, b, vocab) next-token logits of greedy decoding with a full forward of the sequence per step."""
    out = []
    for _ in range(n):
        logits = model(input_ids=ids, use_cache=False).logits[:, -1]
        out.append(logits)
        ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
    return torch.stack(out)


@pytest.mark.parametrize("family", FAMILIES)
def test_static_cache_generate_equals_cache_free_decoding(tiny_model, family):
    model = tiny_model(family)[0]
    ids = random_ids(2, 10)
    bank = random_bank(model, grid_range=(-3.0, 3.0))
    manifold.install(model, bank=bank)
    try:
        ref = _no_cache_greedy(model, ids, N_NEW)
        kw = dict(max_new_tokens=N_NEW, min_new_tokens=N_NEW, do_sample=False, output_logits=True,
                  return_dict_in_generate=True, pad_token_id=0)
        static = model.generate(ids, cache_implementation="static", **kw)
        static_rows = {s: c.f.shape for s, c in bank._static_caches.items()}
    finally:
        manifold.uninstall(model)
    stock = _no_cache_greedy(model, ids, N_NEW)
    assert (ref - stock).abs().max().item() > 1e-3  # the surfaces change the logits
    got = torch.stack(static.logits)
    assert (got - ref).abs().max().item() <= _tol(ref)
    assert torch.equal(static.sequences[:, ids.shape[1]:].T, ref.argmax(-1))
    full = [i for i, kv in enumerate(StaticCache(config=model.config, max_cache_len=16).layers) if not kv.is_sliding]
    assert sorted(static_rows) == [bank.slot(x) for x in full]  # sliding-window layers: features per call


@torch.no_grad()
def _decode(model, ids, cache, n: int, skip_step: int | None = None, bank=None) -> torch.Tensor:
    out = model(input_ids=ids, cache=cache, use_cache=True)
    logits = [out.logits[:, -1]]
    for i in range(n):
        if bank is not None:
            bank.enabled = i != skip_step
        out = model(input_ids=logits[-1].argmax(-1, keepdim=True), cache=cache, use_cache=True)
        logits.append(out.logits[:, -1])
    if bank is not None:
        bank.enabled = True
    return torch.stack(logits)


def test_static_feature_rows_are_the_features_of_the_kv_rows(tiny_model):
    model = tiny_model("llama")[0]
    bank = random_bank(model, grid_range=(-3.0, 3.0))
    manifold.install(model, bank=bank)
    try:
        cache = StaticCache(config=model.config, max_cache_len=20)
        _decode(model, random_ids(2, 7), cache, 4)
        n = 7 + 4
        for slot, layer in enumerate(bank.layers):
            kv = cache.layers[layer]
            want = key_features(kv.keys[:, :, :n], kv.values[:, :, :n], bank.grid_size,
                                *bank.range_of(layer), compiled=False)
            got = bank._static_caches[slot].f[:, :, :n]
            assert (got - want).abs().max().item() <= 1e-6 * max(1.0, want.abs().max().item())
    finally:
        manifold.uninstall(model)


def test_a_step_without_the_surfaces_is_noticed(tiny_model):
    """The KV cache took a step the surfaces did not see (surfaces off for it): the next step recomputes
    every row instead of reading a stale one, as the dynamic cache's check does."""
    model = tiny_model("llama")[0]
    bank = random_bank(model, grid_range=(-3.0, 3.0))
    manifold.install(model, bank=bank)
    try:
        ids = random_ids(2, 7)
        static = _decode(model, ids, StaticCache(config=model.config, max_cache_len=20), 5, 2, bank)
        dynamic = _decode(model, ids, DynamicCache(config=model.config), 5, 2, bank)
    finally:
        manifold.uninstall(model)
    assert (static - dynamic).abs().max().item() <= _tol(dynamic)


def test_left_padded_batch_decodes_as_with_the_dynamic_cache(tiny_model):
    model, tok = tiny_model("qwen3")
    ids = random_ids(2, 9)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # the second row is 6 tokens, left-padded
    bank = random_bank(model, grid_range=(-3.0, 3.0))
    manifold.install(model, bank=bank)
    try:
        kw = dict(attention_mask=mask, max_new_tokens=N_NEW, min_new_tokens=N_NEW, do_sample=False,
                  output_logits=True, return_dict_in_generate=True, pad_token_id=0)
        static = model.generate(ids, cache_implementation="static", **kw)
        dynamic = model.generate(ids, **kw)
    finally:
        manifold.uninstall(model)
    ref = torch.stack(dynamic.logits)
    assert torch.equal(static.sequences, dynamic.sequences)
    assert (torch.stack(static.logits) - ref).abs().max().item() <= _tol(ref)


def test_a_traced_call_uses_the_cache_only_while_it_is_complete():
    """Only an eager call fills the buffer (its address then fixed); a traced call writes its rows in place
    while the cache is complete, and returns None (features of every key) once a step went without it."""
    from types import SimpleNamespace

    from geosteer.kernels.feature_cache import StaticFeatureCache

    g = torch.Generator().manual_seed(0)
    k, v = torch.randn(1, 2, 8, 4, generator=g), torch.randn(1, 2, 8, 4, generator=g)
    kv = SimpleNamespace(cumulative_length=torch.tensor(5), keys=k, values=v)

    def compute(kk, vv):
        return key_features(kk, vv, 4, -3.0, 3.0, compiled=False)

    cache = StaticFeatureCache()
    assert cache.get(kv, k, v, 5, None, compute, tracing=True) is None  # no eager step yet
    f = cache.get(kv, k, v, 5, (-3.0, 3.0), compute, tracing=False)
    assert torch.equal(f[:, :, :5], compute(k, v)[:, :, :5])
    kv.cumulative_length += 1  # the KV cache wrote row 5
    assert cache.get(kv, k, v, 1, None, compute, tracing=True) is f
    assert torch.equal(f[:, :, 5], compute(k[:, :, 5:6], v[:, :, 5:6])[:, :, 0])
    cache.forget()  # a step without the feature cache: a traced call no longer trusts the rows
    assert cache.get(kv, k, v, 1, None, compute, tracing=True) is None


@pytest.mark.parametrize("argv, named", [(["--repeats", "0"], "--repeats"), (["--new-tokens", "1"], "--new-tokens"),
                                         (["--threads", "0"], "--threads")])
def test_static_decode_benchmark_refuses_bad_counts_before_loading(argv, named, capsys, monkeypatch):
    """benchmarks/manifold_static_decode.py: a count out of range exits 2 naming the option, no model built."""
    import importlib.util
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[2] / "benchmarks"
    monkeypatch.syspath_prepend(str(bench))
    spec = importlib.util.spec_from_file_location("manifold_static_decode", bench / "manifold_static_decode.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "load_model", lambda *a, **k: pytest.fail("model loaded"))
    monkeypatch.setattr(sys, "argv", ["manifold_static_decode.py"])
    with pytest.raises(SystemExit) as e:
        mod.main(["--surfaces", "x", *argv])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.endswith(f"error: {named} must be an integer >= {2 if named == '--new-tokens' else 1} "
                        f"(got {argv[1]})")
