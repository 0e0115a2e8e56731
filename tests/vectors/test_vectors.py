"""geosteer.vectors: extraction against output_hidden_states, application against plain forward hooks,
neutral settings on every tiny family, positions (padding, from_token, prompt/generation with the KV
cache), the artifact and the recipe keys."""

from __future__ import annotations

import json

import pytest
import torch

import geosteer
from geosteer.errors import ArtifactError, GeosteerError
from geosteer.methods import is_artifact, load_artifact
from geosteer.models.anatomy import anatomy
from geosteer.vectors import MODES, POINTS, SteeringVectors, extract, load_vectors
from geosteer.vectors.extract import collect_activations
from tests.conftest import TINY_FAMILIES
from tests.vectors.test_peers import PAIRS


def _logits(model, ids, *ivs, **kw):
    with torch.no_grad(), geosteer.steer(model, *ivs):
        return model(input_ids=ids, **kw).logits


def _plain_add(model, vectors: dict, scale: float, positions=None, module: str = "layer"):
    """An independent reference: torch forward hooks on the block modules (``module``: the block itself, or
    its ``mlp_update`` module, the one whose output is the MLP's residual update) adding scale·v to the
    output (at ``positions`` of the sequence only, when given)."""
    handles = []
    for layer, v in vectors.items():
        def hook(mod, args, out, v=v):
            h = out[0] if isinstance(out, tuple) else out
            add = scale * v.to(h.dtype)
            if positions is not None:
                add = torch.zeros_like(h).index_fill(1, torch.tensor(positions, dtype=torch.long), 1.0) * add
            h = h + add
            return (h, *out[1:]) if isinstance(out, tuple) else h
        handles.append(getattr(anatomy(model).blocks[layer], module).register_forward_hook(hook))
    return handles


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_scale_zero_is_stock_and_add_equals_a_plain_hook(tiny_model, family):
    model, tok = tiny_model(family)
    ids = tok(["The cat sat on the mat and looked"], return_tensors="pt").input_ids
    stock = _logits(model, ids)
    sv = extract(model, tok, PAIRS[:3], layers="all", point="resid_post")
    for point, mode in [("resid_post", m) for m in MODES] + [(p, "add") for p in POINTS if p != "resid_post"]:
        moved = SteeringVectors(sv.vectors, point=point, d_model=sv.d_model)
        assert torch.equal(_logits(model, ids, moved.with_(scale=0.0, mode=mode)), stock), (point, mode)
    handles = _plain_add(model, sv.vectors, 2.0)
    try:
        ref = _logits(model, ids)
    finally:
        for h in handles:
            h.remove()
    got = _logits(model, ids, sv.with_(scale=2.0))
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-5)
    assert not torch.allclose(got, stock, atol=1e-3)
    at_mlp = SteeringVectors(sv.vectors, point="mlp_out").with_(scale=2.0)
    handles = _plain_add(model, sv.vectors, 2.0, module="mlp_update")
    try:
        ref = _logits(model, ids)
    finally:
        for h in handles:
            h.remove()
    torch.testing.assert_close(_logits(model, ids, at_mlp), ref, rtol=0, atol=1e-5)


def test_extraction_equals_hidden_states(tiny_model):
    """resid_pre / resid_post read at last / all / from-k positions = a naive loop over output_hidden_states."""
    model, tok = tiny_model("llama")
    prompts = [p for p, _ in PAIRS]
    hs = []
    with torch.no_grad():
        for p in prompts:
            hs.append(model(**tok(p, return_tensors="pt"), output_hidden_states=True).hidden_states)
    for positions, pick in (("last", lambda h: h[-1]), ("all", lambda h: h.mean(0)), ("2", lambda h: h[2:].mean(0)),
                            (-3, lambda h: h[-3:].mean(0))):
        for point, offset in (("resid_pre", 0), ("resid_post", 1)):
            got = collect_activations(model, tok, prompts, [0, 1], point, positions, batch_size=4)
            for layer in (0, 1):
                want = torch.stack([pick(h[layer + offset][0]) for h in hs])
                torch.testing.assert_close(got[layer], want, rtol=0, atol=1e-5)
    # two unpaired prompt sets: the difference of the two means
    neg = [n for _, n in PAIRS][:4]
    sv = extract(model, tok, positive=prompts, negative=neg, layers=[1])
    want = torch.stack([h[2][0, -1] for h in hs]).mean(0) - collect_activations(
        model, tok, neg, [1], "resid_post")[1].mean(0)
    torch.testing.assert_close(sv.vectors[1], want, rtol=0, atol=1e-5)
    assert sv.extraction["paired"] is False and sv.extraction["n_negative"] == 4
    with pytest.raises(GeosteerError, match="needs \\[positive, negative\\] pairs"):
        extract(model, tok, positive=prompts, negative=neg, method="pca")
    with pytest.raises(GeosteerError, match="has only"):
        collect_activations(model, tok, ["Hi"], [0], "resid_post", 40)


def test_prompts_encoded_with_the_tokenizers_special_tokens(tiny_model):
    """``tok(prompt)`` as the tokenizer does by default: a tokenizer that adds a BOS gets it read too."""
    model, tok = tiny_model("llama")

    class WithBos:
        pad_token_id = tok.pad_token_id

        def __call__(self, text, add_special_tokens=True):
            ids = tok(text, add_special_tokens=False)["input_ids"]
            return {"input_ids": [1, *ids] if add_special_tokens else ids}

    prompt = "Tea is best when"
    with torch.no_grad():
        for special in (True, False):
            ids = torch.tensor([WithBos()(prompt, add_special_tokens=special)["input_ids"]])
            want = model(input_ids=ids, output_hidden_states=True).hidden_states[2][0].mean(0)
            got = collect_activations(model, WithBos(), [prompt], [1], "resid_post", "all",
                                      add_special_tokens=special)[1][0]
            torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def test_ablate_and_norm_match_formulas(tiny_model):
    """What the next layer reads: the direction removed (ablate), the norm kept (norm_match)."""
    model, tok = tiny_model("llama")
    ids = tok(["A long way from home, she"], return_tensors="pt").input_ids
    sv = extract(model, tok, PAIRS, layers=[1])
    u = sv.vectors[1] / sv.vectors[1].norm()
    seen = {}
    h = anatomy(model).blocks[2].layer.register_forward_pre_hook(
        lambda m, a, k: seen.__setitem__("x", (a[0] if a else k["hidden_states"]).detach()), with_kwargs=True)
    try:
        _logits(model, ids)
        stock = seen["x"]
        _logits(model, ids, sv.with_(mode="ablate"))
        assert float((seen["x"] @ u).abs().max()) < 1e-5 < float((stock @ u).abs().max())
        torch.testing.assert_close(seen["x"], stock - (stock @ u)[..., None] * u, rtol=0, atol=1e-5)
        _logits(model, ids, sv.with_(mode="ablate_add", scale=3.0))
        torch.testing.assert_close(seen["x"] @ u, torch.full_like(stock[..., 0], 3.0 * float(sv.vectors[1].norm())),
                                   rtol=0, atol=1e-4)
        _logits(model, ids, sv.with_(mode="norm_match", scale=5.0))
        torch.testing.assert_close(seen["x"].norm(dim=-1), stock.norm(dim=-1), rtol=1e-5, atol=0)
        y = stock + 5.0 * sv.vectors[1]
        torch.testing.assert_close(seen["x"], y * stock.norm(dim=-1, keepdim=True) / y.norm(dim=-1, keepdim=True),
                                   rtol=0, atol=1e-5)
    finally:
        h.remove()


def test_from_token_counts_from_the_first_real_token(tiny_model):
    """A left-padded row is steered exactly as the same prompt alone: padding never, from_token counted from
    the row's first real token."""
    model, tok = tiny_model("llama")
    sv = extract(model, tok, PAIRS, layers="0-1").with_(scale=3.0, from_token=2)
    short, long_ = tok("Good morning").input_ids, tok("The weather is lovely today, isn't it").input_ids
    width, n = len(long_), len(short)
    ids = torch.tensor([[tok.pad_token_id] * (width - n) + short, long_])
    mask = torch.tensor([[0] * (width - n) + [1] * n, [1] * width])
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    batch = _logits(model, ids, sv, attention_mask=mask, position_ids=pos)
    for row, alone, start in ((0, short, width - n), (1, long_, 0)):
        one = torch.tensor([alone])
        handles = _plain_add(model, sv.vectors, 3.0, positions=list(range(2, len(alone))))
        try:
            ref = _logits(model, one)
        finally:
            for h in handles:
                h.remove()
        torch.testing.assert_close(batch[row, start:], ref[0], rtol=0, atol=1e-4)
        torch.testing.assert_close(_logits(model, one, sv)[0], ref[0], rtol=0, atol=1e-5)


def test_phase_generation_and_prompt_with_the_kv_cache(tiny_model):
    """generate() with the cache, steering only generated tokens = one full forward steered from the first
    generated position on; steering only the prompt = a plain hook on the prompt positions."""
    model, tok = tiny_model("llama")
    sv = extract(model, tok, PAIRS, layers="0-1").with_(scale=6.0)
    ids = tok(["Once upon a time"], return_tensors="pt").input_ids
    p = ids.shape[1]
    for phase in ("generation", "prompt"):
        with torch.no_grad(), geosteer.steer(model, sv.with_(phase=phase)):
            out = model.generate(ids, max_new_tokens=4, do_sample=False, return_dict_in_generate=True,
                                 output_logits=True, pad_token_id=tok.pad_token_id)
        seq = out.sequences
        if phase == "generation":
            full = _logits(model, seq, sv.with_(from_token=p))
        else:
            handles = _plain_add(model, sv.vectors, 6.0, positions=list(range(p)))
            try:
                full = _logits(model, seq)
            finally:
                for h in handles:
                    h.remove()
        steps = torch.stack(out.logits, 1)[0]
        torch.testing.assert_close(steps, full[0, p - 1:-1], rtol=0, atol=1e-4)
    # the first step of "generation" is the stock prompt pass
    torch.testing.assert_close(_logits(model, ids, sv.with_(phase="generation")), _logits(model, ids), rtol=0, atol=0)


def test_artifact_roundtrip_load_artifact_and_recipe(tiny_model, tmp_path):
    from geosteer.recipe import InterventionSpec, load_recipe, save_recipe

    model, tok = tiny_model("llama")
    sv = extract(model, tok, PAIRS, layers="1-2", method="pca_diff")
    folder = sv.save(tmp_path / "v", command="geosteer learn vectors ...")
    assert is_artifact(folder, "geosteer-vectors")
    from safetensors.torch import load_file

    assert sorted(load_file(str(folder / "vectors.safetensors"))) == ["1", "2"]
    cfg = json.loads((folder / "geosteer_config.json").read_text())
    assert cfg["format"] == "geosteer-vectors" and cfg["point"] == "resid_post" and cfg["layers"] == [1, 2]
    assert "pca_diff" in (folder / "README.md").read_text()
    back = load_artifact(folder, model)
    assert isinstance(back, SteeringVectors) and back.extraction["method"] == "pca_diff"
    for layer in (1, 2):
        assert torch.equal(back.vectors[layer], sv.vectors[layer])
    ids = tok(["The river ran"], return_tensors="pt").input_ids
    want = _logits(model, ids, sv.with_(scale=4.0, mode="ablate_add", layers=[2]))
    spec = InterventionSpec.from_dict({"vectors": str(folder), "vector_scale": "4", "vector_mode": "ablate_add",
                                       "vector_layers": "2"})
    torch.testing.assert_close(_logits(model, ids, *spec.build(model)), want, rtol=0, atol=0)
    saved = save_recipe(tmp_path / "r", spec, base_model="tiny-llama")
    loaded, _ = load_recipe(saved)
    torch.testing.assert_close(_logits(model, ids, *loaded.build(model)), want, rtol=0, atol=0)
    assert InterventionSpec.from_dict({"vectors": str(folder), "vector_scale": 0}).build(model) == []
    for bad, msg in (({"vector_mode": "push"}, "unknown vector mode 'push'"),
                     ({"vector_from": "-1"}, "vector_from must be a finite number in 0 to 2147483647"),
                     ({"vector_phase": "decode"}, "unknown vector phase"),
                     ({"vector_layers": "1"}, "vector_layers= needs vectors=")):
        with pytest.raises(GeosteerError, match=msg):
            InterventionSpec.from_dict(bad)
    with pytest.raises(GeosteerError, match="no vector for layer 0"):
        InterventionSpec.from_dict({"vectors": str(folder), "vector_layers": "0"}).build(model)
    other, _ = tiny_model("qwen3")  # same sizes, another model: refused unless forced
    with pytest.raises(ArtifactError, match="was made for base model 'tiny-llama'"):
        load_vectors(folder, other)
    assert load_vectors(folder, other, force=True).point == "resid_post"
    spec = InterventionSpec.from_dict({"vectors": str(folder)})
    with pytest.raises(ArtifactError, match="was made for base model"):
        spec.build(other)
    assert len(spec.build(other, force=True)) == 1


def test_geosteer_load_lm_eval_and_overflow(tiny_model, tmp_path):
    """The other front doors: geosteer.load, lm-eval's model_args; vectors that overflow are refused at load."""
    model, tok = tiny_model("llama")
    sv = extract(model, tok, PAIRS[:3], layers="0-1")
    folder = sv.save(tmp_path / "v")
    assert isinstance(geosteer.load(folder, model), SteeringVectors)
    ids = tok(["The river ran"], return_tensors="pt").input_ids
    want = _logits(model, ids, sv.with_(scale=3.0, layers=[1]))
    lm_eval = pytest.importorskip("geosteer.integrations.lm_eval")
    lm = lm_eval.GeosteerLM(pretrained="tiny-llama", vectors=str(folder), vector_scale="3", vector_layers="1",
                            batch_size=1, device="cpu")
    with torch.no_grad():
        torch.testing.assert_close(lm.model(input_ids=ids).logits, want, rtol=0, atol=1e-5)
    lm.remove_interventions()
    huge = SteeringVectors({0: torch.full((64,), 3e38)}, d_model=64, base_model=sv.base_model)
    huge.save(tmp_path / "huge")
    with pytest.raises(GeosteerError, match="overflow the model.s forward"):
        load_vectors(tmp_path / "huge", model)
    with pytest.raises(GeosteerError, match="layer 0 is not finite"):
        SteeringVectors({0: torch.tensor([1.0, float("nan")])})


def test_push_to_hub_uploads_the_artifact(tiny_model, tmp_path, monkeypatch):
    huggingface_hub = pytest.importorskip("huggingface_hub")
    from tests.hub_helpers import fake_hf_api

    model, tok = tiny_model("llama")
    sv = extract(model, tok, PAIRS[:2], layers=[0])
    calls = {}
    monkeypatch.setattr(huggingface_hub, "HfApi", fake_hf_api(calls, tmp_path / "up"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # pushing is refused offline; the recorder is local
    assert sv.push_to_hub("someorg/happy", token="t") == "https://huggingface.co/someorg/happy"
    assert calls["repo"] == ("someorg/happy", True)
    assert torch.equal(load_vectors(tmp_path / "up", model).vectors[0], sv.vectors[0])
    assert huggingface_hub.ModelCard.load(tmp_path / "up" / "README.md").data.library_name == "geosteer"
