"""Learned per-layer ∥/⊥ scales (``geosteer learn scales``): neutral at the start, the edit
against per-layer ``ComponentScale`` s, the objective against a naive per-prompt float64 recomputation, the
target rising on the training prompts under the control-KL budget, exact resume, the recipe it writes, and
bad input (one line, exit 2, before the model loads)."""

import json

import pytest
import torch

import geosteer
from geosteer.directional import ComponentScale
from geosteer.directional.learned import LearnedScales
from geosteer.directional.steer_learn import ScaleLearnConfig, learn_scales
from geosteer.errors import GeosteerError
from geosteer.interventions import steer
from geosteer.recipe import load_recipe
from tests.cli_helpers import refused_before_load, run_cli

PROMPTS = ["The cat sat on the", "Paris is the capital of", "One, two, three,", "I think that the answer is"]
TARGETS = [{"prompt": p, "target": " yes"} for p in PROMPTS]
NEGATIVES = [{"prompt": p, "target": " no"} for p in PROMPTS]
CONTROLS = ["Berlin is a city in", "Red, green and", "She opened the door and", "A long time ago"]
TAU = 0.05


def _logits(model, ids, *interventions):
    with torch.no_grad(), steer(model, *interventions):
        return model(ids, use_cache=False).logits


def _naive_logprob(model, tok, items, *interventions) -> torch.Tensor:
    """(n,) Σ log p(continuation) per item: one unpadded forward per prompt, a float64 log-softmax."""
    out = []
    for it in items:
        pre = [tok.bos_token_id] + tok(it["prompt"], add_special_tokens=False).input_ids
        cont = tok(it["target"], add_special_tokens=False).input_ids
        lp = torch.log_softmax(_logits(model, torch.tensor([pre + cont]), *interventions)[0].double(), -1)
        out.append(sum(lp[len(pre) - 1 + j, c] for j, c in enumerate(cont)))
    return torch.stack(out)


def _naive_kl(model, tok, prompts, *interventions) -> tuple[float, float]:
    """Mean KL(stock ‖ steered) over every position of every prompt, and at each prompt's last position."""
    alls, lasts = [], []
    for p in prompts:
        ids = torch.tensor([[tok.bos_token_id] + tok(p, add_special_tokens=False).input_ids])
        ref = torch.log_softmax(_logits(model, ids)[0].double(), -1)
        got = torch.log_softmax(_logits(model, ids, *interventions)[0].double(), -1)
        kl = (ref.exp() * (ref - got)).sum(-1)
        alls.append(kl)
        lasts.append(float(kl[-1]))
    return float(torch.cat(alls).mean()), sum(lasts) / len(lasts)


def _learn(model, tok, out, **kw):
    stop_at, resume = kw.pop("stop_at", None), kw.pop("resume", False)
    cfg = ScaleLearnConfig(**{"steps": 4, "lr": 0.1, "kl_threshold": TAU, "checkpoint_every": 1, **kw})
    return learn_scales(model, tok, TARGETS, CONTROLS, cfg, out, negatives=NEGATIVES, stop_at=stop_at,
                        resume=resume, log=None)


@pytest.mark.parametrize("site", ["attn_out", "mlp_out", "resid_post"])
def test_neutral_start_and_per_layer_scales_equal_component_scale(tiny_model, site):
    model, tok = tiny_model("llama")
    ids = tok(["A sentence to compare the logits on"], return_tensors="pt").input_ids
    stock = _logits(model, ids)
    assert torch.equal(_logits(model, ids, LearnedScales(site, [0, 1, 2])), stock)
    par, perp = [0.3, 1.0, 1.7], [1.2, 0.6, 1.0]
    learned = _logits(model, ids, LearnedScales(site, [0, 1, 2], par, perp))
    per_layer = [ComponentScale(site, p, q, [layer]) for layer, p, q in zip([0, 1, 2], par, perp, strict=True)]
    torch.testing.assert_close(learned, _logits(model, ids, *per_layer), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(learned, stock, atol=1e-3)


def test_objective_and_the_learned_scales_against_naive_recomputation(tiny_model, tmp_path):
    model, tok = tiny_model("llama")
    stock_t, stock_n = _naive_logprob(model, tok, TARGETS), _naive_logprob(model, tok, NEGATIVES)
    scales, rep = _learn(model, tok, tmp_path / "r")
    first = rep["history"][0]  # step 1 runs at s = 1 (the stock model): KL 0 < τ, no penalty
    assert first["target_logprob"] == pytest.approx(float(stock_t.mean()), abs=1e-4)
    assert first["negative_logprob"] == pytest.approx(float(stock_n.mean()), abs=1e-4)
    assert first["loss"] == pytest.approx(-float(stock_t.mean() - stock_n.mean()), abs=2e-4)
    assert first["kl"] == pytest.approx(0.0, abs=1e-6)
    spec, _ = load_recipe(tmp_path / "r")
    built = spec.build(model)
    assert len(built) == 1 and isinstance(built[0], LearnedScales)
    after_t = _naive_logprob(model, tok, TARGETS, *built)
    te = rep["train_eval"]
    assert te["target_gain"] == pytest.approx(float((after_t - stock_t).mean()), abs=2e-4)
    assert te["target_gain"] > 0.05  # the learned scales raise the target on the training prompts
    kl_all, kl_last = _naive_kl(model, tok, CONTROLS, *built)
    assert kl_all == pytest.approx(te["kl"], abs=1e-4) and kl_last == pytest.approx(te["kl_last"], abs=1e-4)
    assert kl_all < 2 * TAU and kl_last < 2 * TAU
    ids = tok(["The cat sat on the"], return_tensors="pt").input_ids
    torch.testing.assert_close(_logits(model, ids, *built), _logits(model, ids, scales), rtol=0, atol=0)
    loaded = geosteer.load(tmp_path / "r" / "scale_learned", model=model)
    assert torch.equal(loaded.s_par, scales.s_par.detach()) and loaded.layers == scales.layers


def test_resume_after_stop_is_exact_and_checkpoints_refuse_other_runs(tiny_model, tmp_path):
    model, tok = tiny_model("llama")
    full, rep = _learn(model, tok, tmp_path / "a")
    _, part = _learn(model, tok, tmp_path / "b", stop_at=2)
    assert part["stopped"] and not (tmp_path / "b").exists()
    resumed, rep2 = _learn(model, tok, tmp_path / "b", resume=True)
    assert torch.equal(resumed.s_par, full.s_par) and torch.equal(resumed.s_perp, full.s_perp)
    assert [h["loss"] for h in rep2["history"]] == [h["loss"] for h in rep["history"]]
    _learn(model, tok, tmp_path / "c", stop_at=1)
    with pytest.raises(GeosteerError, match="belongs to another run \\(site"):
        _learn(model, tok, tmp_path / "c", site="mlp_out", resume=True)
    with pytest.raises(GeosteerError, match="already exists"):
        _learn(model, tok, tmp_path / "c")


def test_cli_writes_a_recipe_and_refuses_bad_input(tiny_model, tmp_path, monkeypatch, capsys):
    model, tok = tiny_model("llama")
    t, n, c = tmp_path / "t.json", tmp_path / "n.json", tmp_path / "c.json"
    t.write_text(json.dumps(TARGETS))
    n.write_text(json.dumps(NEGATIVES))
    c.write_text(json.dumps(CONTROLS))
    base = ["learn", "scales", "--target-file", str(t), "--control-file", str(c),
            "--model", "tiny-llama", "--threads", "1"]
    code, out, err = run_cli(monkeypatch, capsys, *base, "--negative-file", str(n), "--out", str(tmp_path / "o"),
                             "--steps", "2", "--lr", "0.1", "--layers", "1-2", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["target_gain"] > 0 and [r["layer"] for r in doc["scales"]] == [1, 2]
    spec, cfg = load_recipe(tmp_path / "o")
    assert spec.scale_learned.endswith("scale_learned")
    user = tmp_path / "mine"
    user.mkdir()
    (user / "notes.txt").write_text("keep me")
    empty = tmp_path / "e.json"
    empty.write_text("[]")
    outs = ["--out", str(tmp_path / "o2")]
    for extra in (["--kl-threshold", "0", *outs], ["--lr", "-1", *outs], ["--steps", "0", *outs],
                  ["--site", "value_full", *outs], ["--layers", "5-3", *outs], ["--target-file", str(empty), *outs],
                  ["--negative-file", str(tmp_path / "none.json"), *outs], ["--resume", "--overwrite", *outs],
                  ["--out", str(user)]):
        refused_before_load(monkeypatch, capsys, *base, *extra)
    assert sorted(p.name for p in user.iterdir()) == ["notes.txt"] and not (tmp_path / "o2").exists()
