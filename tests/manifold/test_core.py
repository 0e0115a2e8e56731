"""Attention manifolds: grid validation, the surfaces on every tiny family against a per-pair reference,
KV-cache decoding, attach/detach rules, artifacts (the basis and the kernels: tests/kernels)."""

import json

import pytest
import torch

from geosteer import manifold
from geosteer.errors import ArtifactError, GeosteerError
from geosteer.interventions import steer
from geosteer.kernels.bspline import bspline_basis
from geosteer.models.anatomy import anatomy
from geosteer_paper.reproduction.references import per_pair_handlers
from tests.conftest import TINY_FAMILIES, sample_ids

# ----------------------------------------------------------------------------- grid validation


@pytest.mark.parametrize("bad", [(0, -1.0, 1.0), (8, 1.0, 1.0), (8, 2.0, -2.0), (2.5, -1.0, 1.0)])
def test_bad_grid_refused(tiny_model, bad):
    g, lo, hi = bad
    model, _ = tiny_model("llama")
    with pytest.raises(ValueError, match="grid"):
        manifold.install(model, grid_size=g, grid_range=(lo, hi))
    assert manifold.attached_bank(model) is None


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
