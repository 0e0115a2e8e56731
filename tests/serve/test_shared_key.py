"""The shared-key surfaces path (``serve.shared_key``) against a per-pair reference: keys and values gathered
from a paged cache in vLLM's CPU layout, decoding tokens and prefill chunks in one flat batch, another
recipe's sequence in between, sliding windows and soft-capping; runs without vLLM (the main suite too), except
the check that vLLM's own cache writer uses the layout read here."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from geosteer.kernels import exact, ext
from geosteer.served import Surface
from geosteer_vllm import paged_kernel, shared_key

HKV, REP, D, BS, BLOCKS = 2, 3, 8, 4, 16
GRID = (4, -2.0, 2.0)
SEQ_LENS, Q_LENS = [5, 9, 7, 11, 3], [1, 4, 1, 2, 3]  # decode, prefill chunk, decode, chunk, whole prefill
STEERED = [0, 1, 3, 4]  # the sequences of the steered recipe; sequence 2 is another recipe's


def _paged(seed: int = 0):
    """Per sequence its keys/values (S, HKV, D), a cache holding them at random blocks (NaN elsewhere) and the
    block table."""
    g = torch.Generator().manual_seed(seed)
    cache = torch.full((BLOCKS, HKV, BS, 2 * D), float("nan"))
    keys = cache.view(BLOCKS, HKV, 2 * BS, D)[:, :, :BS].reshape(BLOCKS, HKV, BS * D).view(BLOCKS, HKV, D, BS)
    values = cache.view(BLOCKS, HKV, 2 * BS, D)[:, :, BS:]
    free = torch.randperm(BLOCKS, generator=g).tolist()
    table = torch.zeros(len(SEQ_LENS), 4, dtype=torch.int32)
    kv = []
    for s, S in enumerate(SEQ_LENS):
        k = torch.randn(S, HKV, D, generator=g) * 1.5
        v = torch.randn(S, HKV, D, generator=g)
        for p in range(S):
            if p % BS == 0:
                table[s, p // BS] = free.pop()
            blk = int(table[s, p // BS])
            keys[blk, :, :, p % BS] = k[p]
            values[blk, :, p % BS] = v[p]
        kv.append((k, v))
    return cache, table, kv


def _reference(q, k, v, coeff, S, L, window, softcap):
    """Δo (L, H, D) of one sequence by the per-pair formula, with explicitly masked softmax weights."""
    scale = D ** -0.5
    qh = q.transpose(0, 1).unsqueeze(0)  # (1, H, L, D)
    kh, vh = k.transpose(0, 1).unsqueeze(0), v.transpose(0, 1).unsqueeze(0)
    s = torch.einsum("bhld,bhtd->bhlt", qh, kh.repeat_interleave(REP, dim=1)) * scale
    if softcap is not None:
        s = torch.tanh(s / softcap) * softcap
    qpos = torch.arange(S - L, S).view(L, 1)
    j = torch.arange(S).view(1, S)
    visible = (j <= qpos) & ((j > qpos - window) if window > 0 else True)
    a = torch.softmax(s.masked_fill(~visible, float("-inf")), dim=-1)
    full = exact.naive_modulated_attention(a, qh, kh, vh, coeff, *GRID)[0]
    stock = torch.einsum("hlt,thd->lhd", a[0], v.repeat_interleave(REP, dim=1))
    return full - stock


@pytest.fixture(params=["compiled", "torch"])
def backend(request, monkeypatch):
    if request.param == "compiled":
        pytest.importorskip("vllm")  # built in the serving environment (the main suite would add a build)
    if request.param == "compiled" and (paged_kernel.get() is None or ext.get() is None):
        pytest.skip(f"compiled CPU kernels: {paged_kernel.status() if paged_kernel.get() is None else ext.status()}")
    monkeypatch.setattr(shared_key, "COMPILED", request.param == "compiled")
    return request.param


@pytest.mark.parametrize("window,softcap", [(0, None), (3, None), (0, 4.0)])
def test_shared_key_delta_matches_the_per_pair_formula(backend, window, softcap):
    cache, table, kv = _paged()
    g = torch.Generator().manual_seed(1)
    coeff = torch.randn(HKV * REP, D, GRID[0] + 3, GRID[0] + 3, generator=g) * 0.3
    op = Surface(coeff, *GRID)
    qsl = torch.tensor([0, *torch.tensor(Q_LENS).cumsum(0).tolist()], dtype=torch.int32)
    q = torch.randn(int(qsl[-1]), HKV * REP, D, generator=g) * 1.5
    rows = torch.cat([torch.arange(int(qsl[s]), int(qsl[s + 1])) for s in STEERED])
    meta = SimpleNamespace(query_start_loc=qsl, seq_lens=torch.tensor(SEQ_LENS, dtype=torch.int32),
                           block_table=table)
    got = shared_key.surface_delta(op, q[rows], rows, meta, cache, scale=D ** -0.5, softcap=softcap,
                                   window=window)
    want = torch.cat([_reference(q[int(qsl[s]):int(qsl[s + 1])], *kv[s], coeff, SEQ_LENS[s], Q_LENS[s], window,
                                 softcap) for s in STEERED])
    assert torch.isfinite(got).all()
    assert want.abs().max() > 1e-2  # the surfaces do something here
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)


def test_the_rule_takes_only_cpu_float32_with_a_known_layout():
    assert shared_key.supported(True, torch.float32, "auto", "vec")
    assert shared_key.supported(True, torch.float32, "auto", "vec16")
    assert not shared_key.supported(False, torch.float32, "auto", "vec")
    assert not shared_key.supported(True, torch.bfloat16, "auto", "amx")
    assert not shared_key.supported(True, torch.float32, "fp8", "vec")
    assert not shared_key.supported(True, torch.float32, "auto", "neon")


@pytest.mark.parametrize("isa", shared_key.LAYOUTS)
def test_vllm_cache_writer_uses_the_layout_read_here(isa):
    ops = pytest.importorskip("vllm._custom_ops")
    g = torch.Generator().manual_seed(2)
    d = 32  # the smallest head size vLLM's CPU attention takes
    cache = torch.zeros(BLOCKS, HKV, 16 if isa == "vec16" else 32, 2 * d)
    nb, _, bs, _ = cache.shape
    kc, vc = cache.view(nb, HKV, 2 * bs, d).chunk(2, dim=2)
    n = 6
    k, v = torch.randn(n, HKV, d, generator=g), torch.randn(n, HKV, d, generator=g)
    slots = torch.randperm(nb * bs, generator=g)[:n]
    ops.cpu_attn_reshape_and_cache(k, v, kc, vc, slots, isa, k_scale=1.0, v_scale=1.0, kv_cache_dtype="auto")
    table = (slots // bs).view(n, 1).to(torch.int32)  # each slot read as position slot % bs of a sequence
    for i in range(n):
        pos = int(slots[i] % bs)
        gk, gv = shared_key.gather(cache, table[i:i + 1], torch.tensor([pos + 1]), pos + 1)
        torch.testing.assert_close(gk[0, :, pos], k[i], rtol=0, atol=0)
        torch.testing.assert_close(gv[0, :, pos], v[i], rtol=0, atol=0)


def test_throughput_benchmark_refuses_zero_repeats(capsys):
    """benchmarks/serve_throughput.py --repeats 0 exits 2 naming the option, before any engine starts."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "serve_throughput.py"
    spec = importlib.util.spec_from_file_location("serve_throughput", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(SystemExit) as e:
        mod.main(["--repeats", "0"])
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        "error: --repeats must be a positive integer (got 0)")
