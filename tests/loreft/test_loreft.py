"""LoReFT (``geosteer.loreft``): the edit against a naive per-token loop in float64, neutral settings against the
stock logits on every tiny family, strength, the artifact (round trip, bad tensors and base model refused), the
served operations against the Hugging Face edit, and the learner (R stays orthonormal, the target rises)."""

from __future__ import annotations

import json

import pytest
import torch

import geosteer
from geosteer.errors import ArtifactError, GeosteerError
from geosteer.interventions import steer
from geosteer.loreft import LoReFT, LoReFTLearnConfig, learn_loreft, load_loreft
from geosteer.recipe import InterventionSpec
from geosteer.served import ServedOps, Tokens
from tests.cli_helpers import run_cli
from tests.conftest import TINY_FAMILIES

IDS = torch.tensor([[1, 45, 230, 87, 12, 600, 33, 9]])


def _logits(model, *ivs):
    with torch.no_grad(), steer(model, *ivs):
        return model(input_ids=IDS).logits


def _random(model, layers, rank=3, seed=1) -> LoReFT:
    lo = LoReFT.for_model(model, rank, layers, seed=seed)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        lo.W.add_(0.3 * torch.randn(lo.W.shape, generator=g))
        lo.b.copy_(0.5 * torch.randn(lo.b.shape, generator=g))
    return lo


def test_the_edit_matches_a_naive_per_token_loop(tiny_model):
    model, _ = tiny_model("llama")
    layers = [0, 1]
    lo = _random(model, layers).with_(strength=0.7)
    R, W, b = lo.R.double(), lo.W.double(), lo.b.double()
    torch.testing.assert_close(R @ R.transpose(1, 2), torch.eye(3, dtype=torch.float64).expand(2, 3, 3), atol=1e-6,
                               rtol=0)

    def plain(i):
        def hook(module, args, output):
            h = output[0] if isinstance(output, tuple) else output
            y = h.detach().double().clone()
            for row in range(y.shape[0]):
                for t in range(y.shape[1]):
                    x = y[row, t].clone()
                    y[row, t] = x + 0.7 * (R[i].T @ (W[i] @ x + b[i] - R[i] @ x))
            y = y.to(h.dtype)
            return (y, *output[1:]) if isinstance(output, tuple) else y
        return hook

    handles = [model.model.layers[layer].register_forward_hook(plain(i)) for i, layer in enumerate(layers)]
    try:
        want = _logits(model)
    finally:
        for h in handles:
            h.remove()
    torch.testing.assert_close(_logits(model, lo), want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_neutral_settings_give_the_stock_logits(tiny_model, family):
    model, _ = tiny_model(family)
    stock = _logits(model)
    n = model.config.num_hidden_layers
    fresh = LoReFT.for_model(model, 2, list(range(n)), seed=3)  # W = R, b = 0
    torch.testing.assert_close(_logits(model, fresh), stock, atol=2e-5, rtol=0)
    trained = _random(model, list(range(n)))
    assert (_logits(model, trained) - stock).abs().max() > 1e-3
    assert torch.equal(_logits(model, trained.with_(strength=0.0)), stock)  # s = 0: nothing attached
    assert torch.equal(_logits(model), stock)


def test_strength_scales_the_edit_linearly(tiny_model):
    model, _ = tiny_model("llama")
    lo = _random(model, [1])
    h = torch.randn(2, 5, model.config.hidden_size)
    torch.testing.assert_close(lo.with_(strength=2.5).edit(h, 1) - h, 2.5 * (lo.edit(h, 1) - h), atol=1e-5, rtol=1e-5)
    assert lo.strength == 1.0  # with_ copies


def test_the_artifact_round_trips_through_the_recipe(tiny_model, tmp_path):
    model, _ = tiny_model("llama")
    lo = _random(model, [0, 2])
    folder = lo.save(tmp_path / "lo")
    cfg = json.loads((folder / "geosteer_config.json").read_text())
    assert cfg["format"] == "geosteer-loreft" and cfg["layers"] == [0, 2] and cfg["rank"] == 3
    back = geosteer.load(folder, model=model)
    torch.testing.assert_close(_logits(model, back), _logits(model, lo), atol=0, rtol=0)
    spec = InterventionSpec(loreft=str(folder), loreft_strength=0.5)
    torch.testing.assert_close(_logits(model, spec), _logits(model, lo.with_(strength=0.5)), atol=0, rtol=0)
    assert InterventionSpec(loreft=str(folder), loreft_strength=0.0).build(model) == []


def test_bad_artifacts_and_values_are_refused_in_one_line(tiny_model, tmp_path):
    from safetensors.torch import save_file

    model, _ = tiny_model("llama")
    lo = _random(model, [1])
    folder = lo.save(tmp_path / "lo")
    R = lo.R.detach().clone() * 2  # rows no longer of unit length
    save_file({"R": R, "W": lo.W.detach().clone(), "b": lo.b.detach().clone()}, str(folder / "loreft.safetensors"))
    with pytest.raises(ArtifactError):  # the checksum, or the orthonormality check
        load_loreft(folder)
    lo.base_model = "someone/else"
    other = lo.save(tmp_path / "other")
    with pytest.raises(ArtifactError, match="someone/else"):
        load_loreft(other, model)
    assert load_loreft(other, model, force=True).layers == [1]
    with pytest.raises(GeosteerError, match="needs loreft="):
        InterventionSpec(loreft_strength=0.5).validate()
    with pytest.raises(GeosteerError):
        LoReFT.for_model(model, model.config.hidden_size + 1, [0])


def test_served_operations_equal_the_hugging_face_edit(tiny_model):
    model, _ = tiny_model("llama")
    lo = _random(model, [0, 2]).with_(strength=1.5)
    d = model.config.hidden_size
    ops = ServedOps(model.config.num_hidden_layers, d_model=d)
    lo.served_ops(ops)
    assert [i for i, layer in ops.layers.items() if not layer.empty()] == [0, 2]
    x = torch.randn(6, d)
    tokens = Tokens(torch.arange(6), torch.full((6,), 4))
    for layer in (0, 2):
        (fn,) = ops.layers[layer].resid_post
        torch.testing.assert_close(fn(x, {}, tokens), lo.edit(x, layer), atol=0, rtol=0)
    with pytest.raises(ArtifactError, match="d_model"):
        lo.served_ops(ServedOps(4, d_model=d + 1))


PROMPTS = ["The cat sat on the", "Paris is the capital of", "One, two, three,", "I think that the answer is"]
CONTROLS = ["Berlin is a city in", "Red, green and", "She opened the door and", "A long time ago"]


def test_the_learner_raises_the_target_and_keeps_r_orthonormal(tiny_model, tmp_path):
    model, tok = tiny_model("llama")
    targets = [{"prompt": p, "target": " yes"} for p in PROMPTS]
    cfg = LoReFTLearnConfig(layers=[1], rank=2, steps=6, lr=0.02, kl_threshold=0.5, checkpoint_every=0)
    stock = _logits(model)
    lo, rep = learn_loreft(model, tok, targets, CONTROLS, cfg, tmp_path / "lo", log=None)
    assert torch.equal(_logits(model), stock)  # nothing left attached
    assert rep["train_eval"]["target_gain"] > 0
    back = load_loreft(tmp_path / "lo", model)
    R = back.R.double()
    torch.testing.assert_close(R @ R.transpose(1, 2), torch.eye(2, dtype=torch.float64)[None], atol=1e-5, rtol=0)
    assert back.meta["train_eval"]["target_gain"] == pytest.approx(rep["train_eval"]["target_gain"])
    assert not any(p.requires_grad for p in lo.parameters())


def test_learn_loreft_is_a_learner_verb(monkeypatch, capsys):
    code, out, err = run_cli(monkeypatch, capsys, "learn", "loreft", "--help")
    assert code == 0 and "--rank" in out, err


def test_a_loreft_recipe_is_planned_for_serving(tiny_model, tmp_path):
    plan = pytest.importorskip("geosteer_vllm.plan")
    from geosteer.recipe import save_recipe

    model, _ = tiny_model("llama")
    lo = _random(model, [1])
    recipe = save_recipe(tmp_path / "r", InterventionSpec(loreft=str(lo.save(tmp_path / "lo")), loreft_strength=2.0),
                         base_model="tiny-llama")
    meta = plan.meta_model(model.config)
    meta.config._geosteer_name = "tiny-llama"
    planned = plan.plan_recipe("r", recipe, meta)
    assert list(planned.layers) == [1]
    (fn,) = planned.layers[1].resid_post
    x = torch.randn(5, model.config.hidden_size)
    torch.testing.assert_close(fn(x, {}, Tokens(torch.arange(5), torch.full((5,), 5))),
                               lo.with_(strength=2.0).edit(x, 1), atol=1e-6, rtol=0)


def test_show_describes_a_loreft(tiny_model, tmp_path, monkeypatch, capsys):
    model, _ = tiny_model("llama")
    folder = _random(model, [0, 2]).save(tmp_path / "lo")
    code, out, err = run_cli(monkeypatch, capsys, "show", str(folder), "--json")
    assert code == 0, err
    info = json.loads(out)
    assert info["format"] == "geosteer-loreft" and info["rank"] == 3
    assert [row["layer"] for row in info["layers"]] == [0, 2]


def test_the_learner_resumes_exactly(tiny_model, tmp_path):
    model, tok = tiny_model("llama")
    targets = [{"prompt": p, "target": " yes"} for p in PROMPTS]
    cfg = LoReFTLearnConfig(layers=[0, 1], rank=2, steps=4, lr=0.02, kl_threshold=0.5, checkpoint_every=1)
    whole, _ = learn_loreft(model, tok, targets, CONTROLS, cfg, tmp_path / "whole", log=None)
    _, rep = learn_loreft(model, tok, targets, CONTROLS, cfg, tmp_path / "cut", stop_at=2, log=None)
    assert rep["stopped"] and not (tmp_path / "cut").exists()
    resumed, _ = learn_loreft(model, tok, targets, CONTROLS, cfg, tmp_path / "cut", resume=True, log=None)
    for name in ("R", "W", "b"):
        torch.testing.assert_close(getattr(resumed, name), getattr(whole, name), atol=1e-6, rtol=0)
