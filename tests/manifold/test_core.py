"""Attention manifolds: basis vs scipy, exact factored kernel vs a per-pair reference, model integration,
KV-cache decoding, attach/detach rules, artifacts."""

import json

import numpy as np
import pytest
import torch

from geosteer import manifold
from geosteer.attention import AttentionCall, attention_weights
from geosteer.errors import ArtifactError, GeosteerError
from geosteer.interventions import steer
from geosteer.kernels.bspline import bspline_basis, bspline_basis_reference, bspline_local
from geosteer.kernels.exact import modulated_attention, naive_modulated_attention
from geosteer.models.anatomy import anatomy
from geosteer.reproduction.references import keep_mask, per_pair_handlers
from tests.conftest import TINY_FAMILIES, sample_ids

# ----------------------------------------------------------------------------- basis


@pytest.mark.parametrize("g,lo,hi", [(8, -4.0, 4.0), (1, -1.0, 2.0), (16, -3.0, 5.0), (5, 0.5, 0.75)])
def test_basis_matches_scipy(g, lo, hi):
    h = (hi - lo) / g
    x = torch.linspace(lo - 4 * h, hi + 4 * h, 3001, dtype=torch.float64)
    x = torch.cat([x, torch.tensor([lo - 3 * h, hi + 3 * h, lo, hi, lo + h])])  # knots and support ends
    ours = bspline_basis(x, g, lo, hi).numpy()
    ref = bspline_basis_reference(x.numpy(), g, lo, hi)
    assert ours.shape == (x.numel(), g + 3)
    np.testing.assert_allclose(ours, ref, atol=1e-12)
    # float32 too
    ours32 = bspline_basis(x.float(), g, lo, hi).double().numpy()
    np.testing.assert_allclose(ours32, ref, atol=2e-6)


def test_basis_conventions():
    g, lo, hi = 8, -4.0, 4.0
    K = g + 3
    # B_a centred at lo + (a - 1) h: row 5 centred at 0 for a symmetric range
    centres = torch.tensor([lo + (a - 1) * 1.0 for a in range(K)], dtype=torch.float64)
    B = bspline_basis(centres, g, lo, hi)
    assert torch.allclose(B.diagonal(), torch.full((K,), 2 / 3, dtype=torch.float64))
    assert float(bspline_basis(torch.tensor([0.0]), g, lo, hi)[0].argmax()) == 5
    # partition of unity inside [lo, hi], zero outside the support
    inside = torch.linspace(lo, hi - 1e-9, 500, dtype=torch.float64)
    assert torch.allclose(bspline_basis(inside, g, lo, hi).sum(-1), torch.ones(500, dtype=torch.float64))
    outside = torch.tensor([lo - 3.0 - 1e-9, hi + 3.0, 1e6, -1e6, float("inf")], dtype=torch.float64)
    assert torch.all(bspline_basis(outside, g, lo, hi) == 0)


def test_basis_tensor_ranges_broadcast():
    x = torch.randn(3, 50, dtype=torch.float64) * 3
    lo = torch.tensor([-4.0, -2.0, -1.0], dtype=torch.float64)[:, None]
    hi = torch.tensor([4.0, 3.0, 1.5], dtype=torch.float64)[:, None]
    out = bspline_basis(x, 8, lo, hi)
    for i in range(3):
        ref = bspline_basis_reference(x[i].numpy(), 8, float(lo[i]), float(hi[i]))
        np.testing.assert_allclose(out[i].numpy(), ref, atol=1e-12)


def test_local_form_matches_dense():
    x = torch.randn(1000, dtype=torch.float64) * 5
    a0, w = bspline_local(x, 8, -4.0, 4.0)
    dense = torch.zeros(1000, 11 + 6, dtype=torch.float64)
    dense.scatter_(1, (a0 + 3)[:, None] + torch.arange(4), w)
    assert torch.allclose(dense[:, 3:14], bspline_basis(x, 8, -4.0, 4.0))


def test_basis_gradient_matches_finite_differences():
    x = (torch.randn(40, dtype=torch.float64) * 3).requires_grad_()
    c = torch.randn(11, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda t: bspline_basis(t, 8, -4.0, 4.0) @ c, (x,))


@pytest.mark.parametrize("bad", [(0, -1.0, 1.0), (8, 1.0, 1.0), (8, 2.0, -2.0), (2.5, -1.0, 1.0)])
def test_bad_grid_refused(tiny_model, bad):
    g, lo, hi = bad
    model, _ = tiny_model("llama")
    with pytest.raises(ValueError, match="grid"):
        manifold.install(model, grid_size=g, grid_range=(lo, hi))
    assert manifold.attached_bank(model) is None


# ----------------------------------------------------------------------------- kernel exactness


class _Mod(torch.nn.Module):
    is_causal = True


def _case(b, H, Hkv, L, T, d, seed=0, scale=2.0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, H, L, d, generator=g) * scale
    k = torch.randn(b, Hkv, T, d, generator=g) * scale
    v = torch.randn(b, Hkv, T, d, generator=g)
    C = torch.randn(H, d, 11, 11, generator=g) * 0.5
    return q, k, v, C


def _ref(q, k, v, C, mask, lo=-4.0, hi=4.0):
    w = attention_weights(AttentionCall(_Mod(), q, k, v, mask, None, 0.0))
    return naive_modulated_attention(w, q, k, v, C, 8, lo, hi)


@pytest.fixture(params=["torch", "torch-nograd", "ext"])
def path(request, monkeypatch):
    """Run a kernel test on the autograd PyTorch path, the inference PyTorch path and the compiled one."""
    from geosteer.kernels import exact, ext

    if request.param == "ext":
        if ext.get() is None:
            pytest.skip(f"compiled kernels {ext.status()}")
        with torch.no_grad():
            yield request.param
        return
    monkeypatch.setattr(exact, "USE_EXT", False)
    if request.param == "torch-nograd":
        with torch.no_grad():
            yield request.param
    else:
        yield request.param


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("block", [5, 16, 128])
@pytest.mark.parametrize("kind", ["causal", "padding", "window", "float", "decode", "none"])
def test_kernel_exact_vs_per_pair_reference(kind, block, fused, path):
    b, H, Hkv, d = 2, 6, 2, 8  # GQA 3
    L = T = 23
    if kind == "decode":
        L = 3
    q, k, v, C = _case(b, H, Hkv, L, T, d)
    mask, causal = None, False
    if kind == "causal":
        causal = True
    elif kind == "padding":
        mask = keep_mask(b, L, T, [0, 5])
    elif kind == "window":
        mask = keep_mask(b, L, T, [2, 0], window=6)
    elif kind == "float":
        bm = keep_mask(b, L, T, [0, 4])
        mask = torch.zeros(bm.shape).masked_fill(~bm, torch.finfo(torch.float32).min)
    elif kind == "decode":
        mask = keep_mask(b, L, T, [0, 3])
    ref = _ref(q, k, v, C, mask) if kind != "none" else _ref_nomask(q, k, v, C)
    out = modulated_attention(q, k, v, C, 8, -4.0, 4.0, attn_mask=mask, is_causal=causal, block=block,
                              with_value=fused)
    if not fused:
        w = attention_weights(AttentionCall(_Mod(), q, k, v, mask, None, 0.0)) if kind != "none" else \
            torch.softmax(q @ k.repeat_interleave(3, 1).transpose(-1, -2) * d ** -0.5, -1)
        out = out + (w @ v.repeat_interleave(3, 1)).transpose(1, 2)
    assert out.shape == (b, L, H, d)
    if kind == "float":  # fully masked rows: an additive mask averages them (as SDPA does); skip those
        seen = (mask > torch.finfo(torch.float32).min / 2).any(-1)[:, 0]  # (b, L)
        out, ref = out[seen], ref[seen]
    assert (out - ref).abs().max().item() <= 1e-5


def _ref_nomask(q, k, v, C):
    H, d = q.shape[1], q.shape[3]
    rep = H // k.shape[1]
    w = torch.softmax(q @ k.repeat_interleave(rep, 1).transpose(-1, -2) * d ** -0.5, -1)
    return naive_modulated_attention(w, q, k, v, C, 8, -4.0, 4.0)


def test_kernel_fully_masked_rows_give_zero_and_per_layer_range(path):
    q, k, v, C = _case(2, 4, 4, 9, 9, 4)
    mask = keep_mask(2, 9, 9, [0, 4])
    mask[1, :, :4, :] = False  # padded query rows see nothing
    out = modulated_attention(q, k, v, C, 8, -1.5, 2.5, attn_mask=mask, block=4)
    ref = _ref(q, k, v, C, mask, -1.5, 2.5)
    assert torch.isfinite(out).all()
    assert (out - ref).abs().max() <= 1e-5
    assert torch.all(out[1, :4] == 0)


def test_kernel_gradients_match_reference():
    q, k, v, C = _case(1, 4, 2, 7, 7, 4, scale=1.5)
    q, k, v, C = (t.double().requires_grad_() for t in (q, k, v, C))
    out = modulated_attention(q, k, v, C, 8, -4.0, 4.0, is_causal=True, block=3)
    ref = _ref(q, k, v, C, None)
    gw = torch.randn_like(out)
    g1 = torch.autograd.grad((out * gw).sum(), (q, k, v, C))
    g2 = torch.autograd.grad((ref * gw).sum(), (q, k, v, C))
    for a, b in zip(g1, g2, strict=True):
        assert (a - b).abs().max() <= 1e-9


# ----------------------------------------------------------------------------- on the tiny models


def _random_bank(model, seed=0, scale=0.5, **kw):
    bank = manifold.install(model, **kw)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        bank.coefficients.copy_(torch.randn(bank.coefficients.shape, generator=g) * scale)
    return bank


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_zero_surfaces_equal_stock(tiny_model, family):
    model, tok = tiny_model(family)
    ids = sample_ids(tok)
    with torch.no_grad():
        ref = model(ids).logits
    bank = manifold.install(model)
    try:
        with torch.no_grad():
            out = model(ids).logits
        assert torch.equal(out, ref)  # zero layers take the stock path
        bank.coefficients.requires_grad_(True)
        out2 = model(ids).logits  # grad enabled: the factored path itself, with S = 0
        assert (out2 - ref).abs().max().item() <= 1e-5
    finally:
        manifold.uninstall(model)


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_model_with_surfaces_matches_per_pair_reference(tiny_model, family):
    model, tok = tiny_model(family)
    texts = ["The theory of relativity states that the laws of physics are the same for all observers.",
             "She saw the man with the telescope."]
    enc = tok(texts, return_tensors="pt", padding=True)
    _random_bank(model, grid_range=(-3.0, 3.0))
    try:
        with torch.no_grad():
            ours = model(**enc).logits
            base = manifold.uninstall(model)
            removers = per_pair_handlers(model, base)
            ref = model(**enc).logits
            for r in removers:
                r()
            stock = model(**enc).logits
    finally:
        manifold.uninstall(model)
    keep = enc.attention_mask.bool()
    assert (ours - ref)[keep].abs().max().item() <= 1e-4
    assert (ours - stock)[keep].abs().max().item() > 1e-3  # the surfaces do something


@pytest.mark.parametrize("family", ["llama", "mistral", "gemma3", "qwen2", "gpt2"])
def test_kv_cache_generation_matches_full_recompute(tiny_model, family):
    model, tok = tiny_model(family)
    ids = sample_ids(tok, 1)[:, :10]
    bank = _random_bank(model, seed=1, scale=0.3)
    try:
        with torch.no_grad():
            gen = model.generate(ids, max_new_tokens=12, do_sample=False, use_cache=True,
                                 output_logits=True, return_dict_in_generate=True,
                                 pad_token_id=tok.pad_token_id)
            seq = gen.sequences
            full = model(seq, use_cache=False).logits
            nocache = model.generate(ids, max_new_tokens=12, do_sample=False, use_cache=False,
                                     pad_token_id=tok.pad_token_id)
        assert torch.equal(seq, nocache)
        step_logits = torch.stack(gen.logits, 1)[0]  # (new, vocab)
        n0 = ids.shape[1]
        recomputed = full[0, n0 - 1 : n0 - 1 + step_logits.shape[0]]
        assert (step_logits - recomputed).abs().max().item() <= 1e-4
        assert bank._caches  # the decode path reused cached key features
    finally:
        manifold.uninstall(model)


def test_kv_cache_batched_left_padding(tiny_model):
    model, tok = tiny_model("llama")
    tok.padding_side = "left"
    enc = tok(["Hello there, my friend", "Hi"], return_tensors="pt", padding=True)
    _random_bank(model, seed=2, scale=0.3)
    try:
        with torch.no_grad():
            gen = model.generate(**enc, max_new_tokens=8, do_sample=False, pad_token_id=tok.pad_token_id)
            nocache = model.generate(**enc, max_new_tokens=8, do_sample=False, use_cache=False,
                                     pad_token_id=tok.pad_token_id)
        assert torch.equal(gen, nocache)
    finally:
        manifold.uninstall(model)
        tok.padding_side = "right"


def test_feature_cache_not_reused_for_a_different_prompt(tiny_model):
    model, tok = tiny_model("llama")
    _random_bank(model, seed=3, scale=0.3)
    try:
        with torch.no_grad():
            a = tok("The cat sat on the mat", return_tensors="pt").input_ids
            b = tok("A dog ran in the park", return_tensors="pt").input_ids
            model.generate(a, max_new_tokens=5, do_sample=False, pad_token_id=tok.pad_token_id)
            out = model.generate(b, max_new_tokens=5, do_sample=False, pad_token_id=tok.pad_token_id)
            ref = model.generate(b, max_new_tokens=5, do_sample=False, use_cache=False,
                                 pad_token_id=tok.pad_token_id)
        assert torch.equal(out, ref)
    finally:
        manifold.uninstall(model)


# ----------------------------------------------------------------------------- attach / detach


def test_attach_rules(tiny_model):
    model, tok = tiny_model("llama")
    ids = sample_ids(tok, 1)
    with torch.no_grad():
        ref = model(ids).logits
    bank = _random_bank(model)
    with pytest.raises(GeosteerError, match="already attached"):
        bank.attach(model)
    other = manifold.SurfaceBank(bank.config)
    with pytest.raises(GeosteerError, match="already attached"):
        with steer(model, other):
            pass
    # the persistent form replaces cleanly (never stacks)
    bank2 = manifold.install(model)
    assert manifold.attached_bank(model) is bank2
    an = anatomy(model)
    assert all(len(b.attn._geosteer_attention_handlers) == 1 for b in an.blocks)
    assert manifold.uninstall(model) is bank2
    assert manifold.uninstall(model) is None
    assert all(not b.attn._geosteer_attention_handlers for b in an.blocks)
    with torch.no_grad():
        assert torch.equal(model(ids).logits, ref)
        with steer(model, bank):
            changed = model(ids).logits
        assert (changed - ref).abs().max() > 1e-3
        assert torch.equal(model(ids).logits, ref)
    assert manifold.attached_bank(model) is None


def test_attach_subset_of_layers_and_surface(tiny_model):
    model, tok = tiny_model("qwen3")
    bank = manifold.install(model, layers=[2], grid_size=4, grid_range=(-2.0, 2.0))
    try:
        assert bank.coefficients.shape == (1, 4, 16, 7, 7)
        with pytest.raises(ValueError, match="surfaces cover layers 2"):
            bank.slot(0)
        with torch.no_grad():
            bank.coefficients[0, 1, 3, 2, 4] = 1.0
        q, k = torch.meshgrid(torch.linspace(-3, 3, 7), torch.linspace(-3, 3, 5), indexing="ij")
        S = bank.surface(2, 1, 3, q, k)
        Bq = bspline_basis(q, 4, -2.0, 2.0)[..., 2]
        Bk = bspline_basis(k, 4, -2.0, 2.0)[..., 4]
        assert torch.allclose(S, Bq * Bk)
        with pytest.raises(ValueError, match="head 9 out of range"):
            bank.surface(2, 9, 0, q, k)
    finally:
        manifold.uninstall(model)
    with pytest.raises(ValueError, match="out of range"):
        manifold.install(model, layers=[7])


# ----------------------------------------------------------------------------- artifacts


def test_save_load_roundtrip(tiny_model, tmp_path):
    model, tok = tiny_model("llama")
    ids = sample_ids(tok, 1)
    bank = _random_bank(model, layers=[0, 2], grid_range=(-3.0, 2.0))
    bank.history.append({"op": "scale", "alpha": 2.0})
    try:
        with torch.no_grad():
            ref = model(ids).logits
    finally:
        manifold.uninstall(model)
    out = manifold.save(bank, tmp_path / "art", training={"tokens": 123})
    assert (out / "geosteer_config.json").is_file() and (out / "surfaces.safetensors").is_file()
    card = (out / "README.md").read_text()  # model card: tiny models have no Hub id, so no base_model key
    assert "| base model | `tiny-llama`" in card and "base_model:" not in card
    doc = json.loads((out / "geosteer_config.json").read_text())
    assert doc["format"] == "geosteer-surfaces" and doc["layers"] == [0, 2] and doc["grid_size"] == 8
    assert doc["base_model"] == "tiny-llama" and doc["meta"]["training"]["tokens"] == 123
    assert doc["model"]["n_heads"] == 4 and doc["history"][0]["op"] == "scale"
    loaded = manifold.load(out, model=model)
    assert torch.equal(loaded.coefficients, bank.coefficients)
    assert loaded.layers == [0, 2] and loaded.range_of(2) == (-3.0, 2.0)
    with torch.no_grad(), steer(model, loaded):
        assert torch.equal(model(ids).logits, ref)
    # fp16 storage, overwrite in place
    manifold.save(bank, out, dtype="float16")
    half = manifold.load(out / "surfaces.safetensors")
    assert (half.coefficients - bank.coefficients).abs().max() < 1e-2
    assert not list(tmp_path.glob(".art*"))  # no temporary folders left behind


def test_load_errors(tiny_model, tmp_path):
    model, _ = tiny_model("llama")
    other, _ = tiny_model("gemma3")
    bank = manifold.install(model)
    manifold.uninstall(model)
    art = manifold.save(bank, tmp_path / "a")
    with pytest.raises(GeosteerError, match="made for tiny-llama.*head_dim 16 vs the model's 32"):
        manifold.load(art, model=other)
    with pytest.raises(ArtifactError, match="no surfaces artifact"):
        manifold.load(tmp_path / "missing")
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "x.txt").write_text("hi")
    with pytest.raises(ArtifactError, match="missing geosteer_config.json"):
        manifold.load(tmp_path / "plain")
    notjson = tmp_path / "nj"
    notjson.mkdir()
    (notjson / "geosteer_config.json").write_text("{not json")
    (notjson / "surfaces.safetensors").write_bytes(b"xx")
    with pytest.raises(ArtifactError, match="not valid JSON"):
        manifold.load(notjson)
    (notjson / "geosteer_config.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(ArtifactError, match="expected 'geosteer-surfaces'"):
        manifold.load(notjson)
    # a tensor file that does not match its config
    with open(art / "surfaces.safetensors", "r+b") as f:
        f.seek(-4, 2)
        f.write(b"\x00\x01\x02\x03")
    with pytest.raises(ArtifactError, match="checksum"):
        manifold.load(art)


def test_bank_trains(tiny_model):
    """Only the coefficients get gradients; one step of SGD lowers the loss on the batch."""
    model, tok = tiny_model("llama")
    ids = sample_ids(tok, 2)
    bank = manifold.install(model)
    try:
        opt = torch.optim.SGD(bank.parameters(), lr=0.5)
        losses = []
        for _ in range(3):
            loss = model(ids, labels=ids).loss
            opt.zero_grad()
            loss.backward()
            assert bank.coefficients.grad is not None and bank.coefficients.grad.abs().sum() > 0
            assert all(p.grad is None for p in model.parameters())
            opt.step()
            losses.append(loss.item())
        assert losses[-1] < losses[0]
    finally:
        manifold.uninstall(model)


def test_handlers_after_the_bank_still_run(tiny_model):
    """With another attention handler attached after the bank, the bank uses the stock path + Δo so that
    the later handler sees (and may change) the call; the result is the same."""
    from geosteer.record import AttentionRecorder

    model, tok = tiny_model("mistral")
    ids = sample_ids(tok, 2)
    bank = _random_bank(model, seed=4, scale=0.3)
    manifold.uninstall(model)
    rec = AttentionRecorder(what=("value",))
    with torch.no_grad():
        with steer(model, bank):
            alone = model(ids).logits
        with steer(model, bank, rec):
            composed = model(ids).logits
    assert len(rec["value", 0]) == 1
    assert (alone - composed).abs().max().item() <= 1e-4


@pytest.mark.parametrize("causal", [True, False])
def test_compiled_kernel_gradients_match_pytorch_path(monkeypatch, causal):
    from geosteer.kernels import exact, ext

    if ext.get() is None:
        pytest.skip(f"compiled kernels {ext.status()}")
    q, k, v, C = _case(2, 6, 2, 21 if causal else 3, 21, 8)
    q, k, v, C = (t.requires_grad_() for t in (q, k, v, C))
    gw = torch.randn(q.shape[0], q.shape[2], q.shape[1], q.shape[3])
    res = []
    for use in (True, False):
        monkeypatch.setattr(exact, "USE_EXT", use)
        out = modulated_attention(q, k, v, C, 8, -4.0, 4.0, is_causal=causal, block=8)
        res.append((out, *torch.autograd.grad((out * gw).sum(), (q, k, v, C))))
    for a, b in zip(*res, strict=True):
        assert (a - b).abs().max().item() <= 1e-5 * max(1.0, b.abs().max().item())


@pytest.mark.parametrize("grid", [2, 5, 6, 8, 13, 14, 21, 22])
def test_kernel_every_grid_size_matches_reference(grid, path):
    """The compiled epilogue has vector paths for K <= 8, 16, 24 and a scalar one above: all exact."""
    g = torch.Generator().manual_seed(grid)
    b, H, Hkv, L, d = 2, 6, 3, 19, 8
    K = grid + 3
    q = torch.randn(b, H, L, d, generator=g) * 3.0  # some coordinates outside (-4, 4) and its support
    k = torch.randn(b, Hkv, L, d, generator=g) * 3.0
    v = torch.randn(b, Hkv, L, d, generator=g)
    C = torch.randn(H, d, K, K, generator=g) * 0.5
    out = modulated_attention(q, k, v, C, grid, -4.0, 4.0, is_causal=True, block=7)
    scores = q @ k.repeat_interleave(2, 1).transpose(-1, -2) * d ** -0.5
    w = torch.softmax(scores.masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), float("-inf")), -1)
    ref = naive_modulated_attention(w, q, k, v, C, grid, -4.0, 4.0)
    assert (out - ref).abs().max().item() <= 1e-5 * max(1.0, ref.abs().max().item())


def test_compiled_kernels_fall_back_to_one_thread_then_to_pytorch(monkeypatch):
    """A compiler without OpenMP still gets the (serial) compiled kernels; no compiler gets the PyTorch path."""
    from geosteer.kernels import ext

    calls = []

    def build(cache, name, omp):
        calls.append((name, tuple(omp)))
        if omp or name == "broken":
            raise RuntimeError("unsupported option '-fopenmp'")
        return "module"

    monkeypatch.setattr(ext, "_state", {"tried": False, "mod": None, "error": None, "serial": None})
    monkeypatch.setattr(ext, "_build", build)
    monkeypatch.delenv("GEOSTEER_NO_EXT", raising=False)
    assert ext.get() == "module"
    assert [c[1] for c in calls] == [("-fopenmp",), ()]
    assert ext.status().startswith("compiled, one thread (no OpenMP: RuntimeError: unsupported option")

    def no_compiler(cache, name, omp):
        raise OSError("no C++ compiler")

    monkeypatch.setattr(ext, "_state", {"tried": False, "mod": None, "error": None, "serial": None})
    monkeypatch.setattr(ext, "_build", no_compiler)
    assert ext.get() is None
    assert ext.status() == "unavailable (OSError: no C++ compiler)"
