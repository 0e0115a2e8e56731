"""The fused Triton surface kernels, run on the CPU in Triton's interpreter (TRITON_INTERPRET=1): forward,
split-K decode, backward and the row log-sum-exp against the per-pair reference; the backend switch; every
tiny family through ``manifold.install(backend="triton")``. Shapes are tiny: the interpreter is slow.

Triton decides interpreted vs compiled when it is first imported (its own ``tl.zeros`` etc. are jitted
then), and a model forward imports it. So unless this process started with TRITON_INTERPRET=1, the cases
are skipped here and ``test_interpreter_cases_in_a_subprocess`` runs this file (and test_triton_low_rank.py)
in a child process that does.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from geosteer import manifold
from geosteer.attention import AttentionCall, add_attention_handler, attention_weights
from geosteer.errors import GeosteerError
from geosteer.kernels.exact import backend_choice, modulated_attention, naive_modulated_attention, use_triton
from geosteer.models.anatomy import anatomy
from geosteer_paper.reproduction.references import keep_mask, per_pair_handlers
from tests.conftest import TINY_FAMILIES

pytest.importorskip("triton")
INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"


@pytest.mark.serial
def test_interpreter_cases_in_a_subprocess():
    if INTERPRETING:
        pytest.skip("this process runs the cases itself")
    env = dict(os.environ, TRITON_INTERPRET="1")
    root = Path(__file__).resolve().parents[2]
    files = [__file__, str(Path(__file__).with_name("test_triton_low_rank.py"))]  # one child: one start-up
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *files], cwd=root,
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and " failed" not in r.stdout


@pytest.fixture(scope="module")
def fused():
    """geosteer.kernels.triton with its kernels in the interpreter (only in a TRITON_INTERPRET=1 process)."""
    if not INTERPRETING:
        pytest.skip("needs TRITON_INTERPRET=1 from the start (run by test_interpreter_cases_in_a_subprocess)")
    from geosteer.kernels import triton as fused_mod

    assert fused_mod.interpreted()
    return fused_mod


class _Mod(torch.nn.Module):
    is_causal = True


def _case(b, H, Hkv, L, T, d, seed=0, scale=2.0, grid=8):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, H, L, d, generator=g) * scale
    k = torch.randn(b, Hkv, T, d, generator=g) * scale
    v = torch.randn(b, Hkv, T, d, generator=g)
    C = torch.randn(H, d, grid + 3, grid + 3, generator=g) * 0.5
    return q, k, v, C


def _ref(q, k, v, C, mask, softcap=None, grid=8, lo=-4.0, hi=4.0):
    """Per-pair reference (fp64) with the stock weights (plain softmax over the masked scores)."""
    q, k, v, C = (t.double() for t in (q, k, v, C))
    rep = q.shape[1] // k.shape[1]
    s = q @ k.repeat_interleave(rep, 1).transpose(-1, -2) * q.shape[-1] ** -0.5
    if softcap is not None:
        s = torch.tanh(s / softcap) * softcap
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask.double()
    w = torch.nan_to_num(torch.softmax(s, -1), nan=0.0)
    return naive_modulated_attention(w, q, k, v, C, grid, lo, hi)


@pytest.mark.parametrize("kind", ["causal", "padding", "window", "float", "none", "softcap"])
def test_forward_matches_per_pair_reference(fused, kind):
    # GQA 3 (one batch row) or 2; head_dim not a power of two; lengths not multiples of the tiles
    b, H, Hkv = (1, 3, 1) if kind in ("causal", "none", "softcap") else (2, 2, 1)
    d, L = 12, 19
    q, k, v, C = _case(b, H, Hkv, L, L, d)
    tiles = dict(block_m=16, block_n=16) if kind == "causal" else {}  # several query and key tiles
    mask, causal, softcap = None, False, None
    if kind == "causal":
        causal, mask_ref = True, keep_mask(b, L, L, [0] * b)
    elif kind in ("padding", "window"):
        mask = mask_ref = keep_mask(b, L, L, [0, 5], window=6 if kind == "window" else None)
    elif kind == "float":
        bm = keep_mask(b, L, L, [0, 4])
        mask = mask_ref = torch.zeros(bm.shape).masked_fill(~bm, -1e9)
    elif kind == "softcap":
        causal, softcap, mask_ref = True, 3.0, keep_mask(b, L, L, [0] * b)
    else:
        mask_ref = None
    out, lse = fused.modulated_attention_triton(q, k, v, C, 8, -4.0, 4.0, attn_mask=mask, is_causal=causal,
                                                softcap=softcap, return_lse=True, **tiles)
    ref = _ref(q, k, v, C, mask_ref, softcap=softcap)
    assert out.shape == (b, L, H, d) and out.dtype == torch.float32
    if kind == "float":  # fully masked rows: an additive mask averages them (as SDPA does); compare the rest
        seen = (mask > -1e8).any(-1)[:, 0]
        out, ref = out[seen], ref[seen]
    assert (out.double() - ref).abs().max().item() <= 1e-5
    if kind != "float":
        # the row log-sum-exp of the scaled (soft-capped, masked) scores
        s = q.double() @ k.double().repeat_interleave(H // Hkv, 1).transpose(-1, -2) * d ** -0.5
        if softcap is not None:
            s = torch.tanh(s / softcap) * softcap
        if mask_ref is not None:
            s = s.masked_fill(~mask_ref, float("-inf"))
        want = torch.logsumexp(s, -1)
        seen = torch.isfinite(want)
        assert (lse.double()[seen] - want[seen]).abs().max().item() <= 1e-5
        assert torch.all(torch.isinf(lse[~seen]))


def test_fully_masked_rows_zero_and_value_dim_chunks(fused):
    q, k, v, C = _case(2, 1, 1, 9, 9, 24)
    mask = keep_mask(2, 9, 9, [0, 4])
    mask[1, :, :4, :] = False  # padded query rows see nothing
    for dv in (16, 32):  # two chunks of value dims (BLOCK_D = 32) or one
        out = fused.modulated_attention_triton(q, k, v, C, 8, -1.5, 2.5, attn_mask=mask, dv=dv, block_n=16)
        ref = _ref(q, k, v, C, mask, lo=-1.5, hi=2.5)
        assert torch.isfinite(out).all()
        assert (out.double() - ref).abs().max().item() <= 1e-5
        assert torch.all(out[1, :4] == 0)


def test_sliding_window_argument_and_delta_only(fused):
    b, H, Hkv, d, L = 1, 2, 1, 8, 21
    q, k, v, C = _case(b, H, Hkv, L, L, d, seed=1)
    keep = keep_mask(b, L, L, [0], window=5)
    out = fused.modulated_attention_triton(q, k, v, C, 8, -4.0, 4.0, is_causal=True, sliding_window=5,
                                           with_value=False)
    stock = _ref(q, k, v, torch.zeros_like(C), keep)
    ref = _ref(q, k, v, C, keep) - stock
    assert (out.double() - ref).abs().max().item() <= 1e-5


@pytest.mark.parametrize("split", [1, 3])
def test_decode_split_keys_matches_reference(fused, split):
    b, H, Hkv, d, L, T = 2, 2, 1, 16, 2, 45  # GQA 2, 2 new queries against 43 cached keys
    q, k, v, C = _case(b, H, Hkv, L, T, d, seed=2)
    mask = keep_mask(b, L, T, [0, 7])
    out, lse = fused.modulated_attention_triton(q, k, v, C, 8, -4.0, 4.0, attn_mask=mask, split=split,
                                                block_n=16, return_lse=True)
    ref = _ref(q, k, v, C, mask)
    assert (out.double() - ref).abs().max().item() <= 1e-5
    s = (q.double() @ k.double().repeat_interleave(2, 1).transpose(-1, -2) / 4.0).masked_fill(~mask, float("-inf"))
    assert (lse.double() - torch.logsumexp(s, -1)).abs().max().item() <= 1e-5


def test_bf16_inputs_fp32_accumulation(fused):
    q, k, v, C = _case(1, 2, 1, 17, 17, 16, seed=3)
    qb, kb, vb = q.bfloat16(), k.bfloat16(), v.bfloat16()
    out = fused.modulated_attention_triton(qb, kb, vb, C, 8, -4.0, 4.0, is_causal=True)
    assert out.dtype == torch.bfloat16
    ref = _ref(qb.float(), kb.float(), vb.float(), C, keep_mask(1, 17, 17, [0]))  # same rounded inputs
    # only the output's own bf16 rounding (relative 2^-8) separates the two
    assert ((out.double() - ref).abs() <= ref.abs() * 2 ** -8 + 1e-6).all()


def _grad_case(kind):
    """(inputs, kernel kwargs, reference keep-mask, softcap, with_value, rows to compare) of one backward case."""
    b, H, Hkv, L, T, d = dict(causal=(1, 2, 1, 19, 19, 12), window=(1, 2, 1, 13, 13, 8),
                              decode=(2, 2, 1, 3, 20, 8), float=(2, 2, 2, 9, 9, 8))[kind]
    q, k, v, C = _case(b, H, Hkv, L, T, d, seed=4, scale=1.5)
    kw, keep, softcap, with_value = {}, keep_mask(b, L, T, [0] * b), None, True
    if kind == "causal":
        kw = dict(is_causal=True, block_m=16, block_n=16)  # several query and key tiles
    elif kind == "window":
        kw, keep = dict(is_causal=True, sliding_window=4), keep_mask(b, L, T, [0] * b, window=4)
    elif kind == "decode":  # 3 new queries against a padded cache, Δo only
        keep = keep_mask(b, L, T, [0, 7])
        kw, with_value = dict(attn_mask=keep, block_n=16), False
    else:  # additive padding mask and soft-capping
        pad = keep_mask(b, L, T, [0, 3])
        keep = torch.zeros(pad.shape).masked_fill(~pad, -1e9)
        kw, softcap = dict(attn_mask=keep, softcap=2.0), 2.0
    rows = (keep > -1e8).any(-1)[:, 0] if kind == "float" else torch.ones(b, L, dtype=torch.bool)
    return (q, k, v, C), kw, keep, softcap, with_value, rows


def _ref_out(q, k, v, C, keep, softcap, with_value):
    ref = _ref(q, k, v, C, keep, softcap=softcap)
    return ref if with_value else ref - _ref(q, k, v, torch.zeros_like(C), keep, softcap=softcap)


@pytest.mark.parametrize("kind", ["causal", "window", "decode", "float"])
def test_backward_kernels_match_autograd_of_reference(fused, kind):
    """dq, dk, dv, dC of the Triton backward = torch autograd through the fp64 per-pair reference (GQA, odd
    lengths, head_dim not a power of two, sliding window, padded decode cache with Δo only, additive mask
    with soft-capping)."""
    inputs, kw, keep, softcap, with_value, rows = _grad_case(kind)
    q, k, v, C = (t.requires_grad_() for t in inputs)
    out = fused.modulated_attention_triton(q, k, v, C, 8, -4.0, 4.0, with_value=with_value, **kw)
    ref = _ref_out(q, k, v, C, keep, softcap, with_value)
    # rows that an additive mask hides entirely average all keys in fp32 but not in fp64: left out (weight 0)
    gw = torch.randn(out.shape, generator=torch.Generator().manual_seed(0)) * rows[:, :, None, None]
    g1 = torch.autograd.grad((out * gw).sum(), (q, k, v, C))
    g2 = torch.autograd.grad((ref * gw.double()).sum(), (q, k, v, C))
    for a, b in zip(g1, g2, strict=True):
        assert a.dtype == torch.float32
        assert (a.double() - b).abs().max().item() <= 1e-5 * max(1.0, b.abs().max().item())


def test_backward_bf16_and_through_the_backend(fused, monkeypatch):
    """bf16 inputs through modulated_attention(backend triton): gradients in the inputs' dtype, equal to the
    reference on the same rounded inputs up to their own bf16 rounding; only the kernels that are needed run
    (a frozen q, k, v: dC alone)."""
    monkeypatch.setenv("GEOSTEER_MANIFOLD_BACKEND", "triton")
    q, k, v, C = _case(1, 2, 1, 11, 11, 8, seed=4, scale=1.5)
    qb, kb, vb = (t.bfloat16().requires_grad_() for t in (q, k, v))
    C.requires_grad_()
    out = modulated_attention(qb, kb, vb, C, 8, -4.0, 4.0, is_causal=True)
    assert out.dtype == torch.bfloat16
    gw = torch.randn(out.shape, generator=torch.Generator().manual_seed(0)).bfloat16().float()  # ∂L/∂out is bf16
    g1 = torch.autograd.grad((out.float() * gw).sum(), (qb, kb, vb, C))
    leaves = [t.detach().float().requires_grad_() for t in (qb, kb, vb)]
    ref = _ref(*leaves, C, keep_mask(1, 11, 11, [0]))
    g2 = torch.autograd.grad((ref * gw.double()).sum(), (*leaves, C))
    for a, b, x in zip(g1, g2, (qb, kb, vb, C), strict=True):
        assert a.dtype == x.dtype
        assert ((a.double() - b).abs() <= b.abs() * 2 ** -8 + 1e-5 * b.abs().max().item()).all()
    only_c = modulated_attention(qb.detach(), kb.detach(), vb.detach(), C, 8, -4.0, 4.0, is_causal=True)
    (gc,) = torch.autograd.grad((only_c.float() * gw).sum(), (C,))
    assert (gc.double() - g2[3]).abs().max().item() <= 1e-5 * max(1.0, g2[3].abs().max().item())


def test_exclude_self_weight_from_the_kernels_lse(fused):
    from geosteer.directional.value import self_weight, self_weight_from_lse

    q, k, v, _ = _case(1, 4, 2, 13, 13, 8, seed=5)
    out, lse = fused.modulated_attention_triton(q, k, v, None, 8, -4.0, 4.0, is_causal=True, return_lse=True)
    call = AttentionCall(_Mod(), q, k, v, None, None, 0.0)
    sdpa = torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1),
                                                            is_causal=True)
    assert (out - sdpa.transpose(1, 2)).abs().max().item() <= 1e-5  # coeff=None: stock attention
    a_tt = self_weight_from_lse(call, lse)  # A_tt = exp(s_tt − lse_t), O(T·d)
    w = attention_weights(call)  # materialised reference
    diag = torch.diagonal(w, dim1=-2, dim2=-1).reshape(a_tt.shape)
    assert (a_tt - diag).abs().max().item() <= 1e-5
    assert (a_tt - self_weight(call)).abs().max().item() <= 1e-5


def test_stock_lse_on_the_triton_path(fused, tiny_model, monkeypatch, family="gemma3"):
    """Off the CPU's plain causal case, stock_attention_with_lse runs the Triton stock kernel (padding masks,
    sliding windows, head_dim ≠ d/h on gemma3; GQA and windows on qwen2 in the next test): its output is the
    stock output and A_tt from its log-sum-exp is the diagonal of the materialised attention weights."""
    from geosteer.attention import stock_attention_with_lse
    from geosteer.directional.value import self_weight_from_lse

    monkeypatch.setenv("GEOSTEER_MANIFOLD_BACKEND", "triton")
    model, tok = tiny_model(family)
    enc = tok(["The laws of physics are the same for all.", "She saw the man."], return_tensors="pt",
              padding=True)
    seen = []

    def handler(call, proceed):
        out, w = proceed(call)
        seen.append((call, out, stock_attention_with_lse(call)))
        return out, w

    rms = [add_attention_handler(b.attn, handler) for b in anatomy(model).blocks]
    try:
        with torch.no_grad():
            model(**enc)
    finally:
        for r in rms:
            r()
    keep = enc.attention_mask.bool()  # (b, q): rows of real tokens
    assert seen and all(f is not None for _, _, f in seen)
    for call, out, (fo, lse) in seen:
        assert (fo - out)[keep].abs().max().item() <= 1e-5
        a_tt = self_weight_from_lse(call, lse)  # (b, Hkv, n_rep, q)
        diag = torch.diagonal(attention_weights(call), dim1=-2, dim2=-1).reshape(a_tt.shape)
        rows = keep[:, None, None, :].expand(a_tt.shape)
        assert (a_tt - diag)[rows].abs().max().item() <= 1e-5


def test_exclude_self_measure_and_stock_gradients_on_the_triton_path(fused, tiny_model, monkeypatch):
    """DirectionalMeasure's value statistics (A_tt, o/c ratios) are the same with the Triton log-sum-exp as with
    the blockwise fallback; the stock kernel's backward (no surfaces) = autograd of SDPA."""
    from geosteer import steer
    from geosteer.directional.measure import DirectionalMeasure

    model, tok = tiny_model("qwen2")  # GQA 2, sliding window on layer 1
    enc = tok(["The laws of physics are the same for all.", "She saw the man."], return_tensors="pt",
              padding=True)
    rows = {}
    for backend in ("triton", "torch"):
        monkeypatch.setenv("GEOSTEER_MANIFOLD_BACKEND", backend)
        meas = DirectionalMeasure(layers=[0, 1], residual=False)
        with torch.no_grad(), steer(model, meas):
            model(**enc)
        rows[backend] = meas.rows()
    assert len(rows["triton"]) == len(rows["torch"]) > 0
    for a, b in zip(rows["triton"], rows["torch"], strict=True):
        assert a.keys() == b.keys()
        for key, x in a.items():
            if isinstance(x, float) and not (x != x and b[key] != b[key]):  # NaN in both: no tokens
                assert abs(x - b[key]) <= 1e-5 * max(1.0, abs(b[key])), key
            else:
                assert x == b[key], key
    q, k, v, _ = _case(1, 4, 2, 13, 13, 8, seed=6)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out = fused.modulated_attention_triton(q, k, v, None, 1, 0.0, 1.0, is_causal=True)
    sdpa = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double().repeat_interleave(2, 1),
                                                            v.double().repeat_interleave(2, 1), is_causal=True)
    gw = torch.randn(out.shape, generator=torch.Generator().manual_seed(0))
    g1 = torch.autograd.grad((out * gw).sum(), (q, k, v))
    g2 = torch.autograd.grad((sdpa.transpose(1, 2) * gw.double()).sum(), (q, k, v))
    for a, b in zip(g1, g2, strict=True):
        assert (a.double() - b).abs().max().item() <= 1e-5 * max(1.0, b.abs().max().item())


def test_backend_switch(fused, monkeypatch, tiny_model):
    q, k, v, C = _case(1, 2, 2, 5, 5, 4)
    monkeypatch.setenv("GEOSTEER_MANIFOLD_BACKEND", "cuda")
    with pytest.raises(GeosteerError, match="valid: triton, torch, cpu, auto"):
        modulated_attention(q, k, v, C, 8, -4.0, 4.0, is_causal=True)
    model, _ = tiny_model("llama")
    with pytest.raises(GeosteerError, match="not a surface backend"):
        manifold.install(model)
    assert manifold.attached_bank(model) is None  # refused before anything changed
    monkeypatch.delenv("GEOSTEER_MANIFOLD_BACKEND")
    monkeypatch.delenv("TRITON_INTERPRET")
    with pytest.raises(GeosteerError, match="runs on CUDA tensors"):
        modulated_attention(q, k, v, C, 8, -4.0, 4.0, is_causal=True, backend="triton")
    # automatic: Triton on CUDA only (the CPU keeps the compiled kernels / PyTorch); torch: never Triton
    assert not use_triton(backend_choice(None), q, -4.0, 4.0)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert use_triton(backend_choice("triton"), q, -4.0, 4.0)
    assert not use_triton(backend_choice("torch"), q, -4.0, 4.0)
    assert not use_triton(backend_choice("triton"), q, -4.0, 4.0, dropout=0.1)  # dropout: PyTorch path


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_every_family_through_install(fused, tiny_model, family):
    model, tok = tiny_model(family)
    enc = tok(["The laws of physics are the same for all.", "She saw the man."], return_tensors="pt",
              padding=True)
    # one layer (the second: sliding-window on qwen2, mistral and gemma3, whose head_dim is 32 ≠ d/h = 16)
    bank = manifold.install(model, grid_range=(-3.0, 3.0), layers=[1], backend="triton")
    g = torch.Generator().manual_seed(0)
    try:
        with torch.no_grad():
            bank.coefficients.copy_(torch.randn(bank.coefficients.shape, generator=g) * 0.5)
            ours = model(**enc).logits
            manifold.uninstall(model)
            removers = per_pair_handlers(model, bank)
            ref = model(**enc).logits
            for r in removers:
                r()
            stock = model(**enc).logits
    finally:
        manifold.uninstall(model)
    keep = enc.attention_mask.bool()
    assert (ours - ref)[keep].abs().max().item() <= 1e-4
    assert (ours - stock)[keep].abs().max().item() > 1e-3


def test_gpu_scale_dry_run(fused, tmp_path):
    """The prepared GPU script's CPU dry run (tiny shape, in this interpreter process): the exactness checks
    pass and every section of the record is there."""
    import importlib.util
    import json

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_scale.py"
    spec = importlib.util.spec_from_file_location("gpu_scale", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "scale.json"
    assert mod.main(["--dry-run", "--out", str(out)]) == 0
    rec = json.loads(out.read_text())
    tiny = rec["shapes"]["tiny"]
    assert rec["ok"] and set(tiny) >= {"kernel_checks", "model_checks", "forward", "decode", "train_step"}
    assert max(v for k, v in tiny["kernel_checks"].items() if "float32" in k) <= 1e-4
    assert tiny["model_checks"]["surfaces_effect_max_abs"] > 0
    assert {"stock_s", "triton_s", "torch_s"} <= set(tiny["forward"]["40"]) and tiny["train_step"]["grad_finite"]
    rank2 = tiny["rank2"]  # the narrow rank-2 kernel: checked against the PyTorch path, then timed
    assert any(k.startswith("rank2_") for k in tiny["kernel_checks"])
    assert rank2["model_checks"]["rank2_effect_max_abs"] > 0
    assert {"stock_s", "exact_s", "rank2_s"} <= set(rank2["forward"]["16"])
    graphs = tiny["decode_graphs"]["batch2"]  # ok: the traced static-cache step gave the eager step's logits
    assert "first_step_max_abs" in graphs and graphs["surfaces_tok_s"] > 0 and graphs["stock_tok_s"] > 0
    assert graphs["feature_cache_live"]  # the graphed surfaces steps decoded from the feature cache


def test_cached_decoding_on_the_triton_backend(fused, tiny_model):
    """KV-cache decoding through install(backend="triton") (no feature cache) gives the scores of the
    PyTorch path's cached decoding (which the core tests check against full recomputation)."""
    model, tok = tiny_model("qwen2")  # layer 1: sliding window
    enc = tok(["The laws of physics are", "She saw"], return_tensors="pt", padding=True)
    kw = dict(max_new_tokens=3, do_sample=False, output_scores=True, return_dict_in_generate=True)
    bank = manifold.install(model, grid_range=(-3.0, 3.0), layers=[1], backend="triton")
    try:
        with torch.no_grad():
            bank.coefficients.copy_(torch.randn(bank.coefficients.shape, generator=torch.Generator().manual_seed(1)))
            ours = model.generate(**enc, **kw)
            assert not bank._caches  # the Triton backend keeps no feature cache
            bank.backend = "torch"
            ref = model.generate(**enc, **kw)
            assert bank._caches  # the PyTorch path does
    finally:
        manifold.uninstall(model)
    assert torch.equal(ours.sequences, ref.sequences)
    for a, b in zip(ours.scores, ref.scores, strict=True):
        assert (a - b).abs().max().item() <= 1e-4
