"""Learned steering surfaces (``geosteer learn steering-surfaces``): the objective against a naive per-prompt
log-softmax recomputation, the target rising on held-out prompts under the control-KL budget, the neutral
starting point, checkpoints that cannot resume as the other verb's, the artifact through the recipe, and bad
input (one line, exit 2, before the model loads; never over a folder of the user's files)."""

import json

import pytest
import torch
from safetensors.torch import load_file

from geosteer import manifold
from geosteer.errors import GeosteerError
from geosteer.interventions import steer
from geosteer.manifold.wall_learn import WallLearnConfig
from geosteer.manifold.wall_learn_train import learn_walls
from tests.cli_helpers import refused_before_load, run_cli

PROMPTS = ["The cat sat on the", "Paris is the capital of", "One, two, three,", "I think that the answer is"]
TARGETS = [{"prompt": p, "target": " yes"} for p in PROMPTS]
NEGATIVES = [{"prompt": p, "target": " no"} for p in PROMPTS]
HELD_OUT = [{"prompt": p, "target": " yes"} for p in ["The dog ran to the", "My favourite colour is",
                                                      "We went to the"]]
CONTROLS = ["Berlin is a city in", "Red, green and", "She opened the door and", "A long time ago"]
HELD_OUT_CONTROLS = ["The sun rises in the", "He said that"]
TAU = 0.05


def _zero_bank(model):
    """Identity surfaces (zero coefficients: the stock model) on two layers, a small grid."""
    bank = manifold.install(model, grid_size=4, layers=[1, 2])
    manifold.uninstall(model)
    return bank


def _naive_logprob(model, tok, items, *interventions) -> torch.Tensor:
    """(n,) Σ log p(continuation) per item, one unpadded forward per prompt and a float64 log-softmax."""
    out = []
    for it in items:
        pre = [tok.bos_token_id] + tok(it["prompt"], add_special_tokens=False).input_ids
        cont = tok(it["target"], add_special_tokens=False).input_ids
        with torch.no_grad(), steer(model, *interventions):
            logits = model(torch.tensor([pre + cont]), use_cache=False).logits[0].double()
        lp = torch.log_softmax(logits, -1)
        out.append(sum(lp[len(pre) - 1 + j, c] for j, c in enumerate(cont)))
    return torch.stack(out)


def _naive_kl(model, tok, prompts, bank) -> tuple[float, float]:
    """Mean KL(stock ‖ steered) over every position, and at each prompt's last position."""
    alls, lasts = [], []
    for p in prompts:
        ids = torch.tensor([[tok.bos_token_id] + tok(p, add_special_tokens=False).input_ids])
        with torch.no_grad():
            ref = torch.log_softmax(model(ids, use_cache=False).logits[0].double(), -1)
            with steer(model, bank):
                got = torch.log_softmax(model(ids, use_cache=False).logits[0].double(), -1)
        kl = (ref.exp() * (ref - got)).sum(-1)
        alls.append(kl)
        lasts.append(float(kl[-1]))
    return float(torch.cat(alls).mean()), sum(lasts) / len(lasts)


def _steer(model, tok, out, **kw):
    stop_at, resume = kw.pop("stop_at", None), kw.pop("resume", False)
    cfg = WallLearnConfig(**{"mode": "dense", "steps": 3, "lr": 0.1, "kl_threshold": TAU, "sparsity": 0.0,
                             "checkpoint_every": 1, "add_bos": True, **kw})  # BOS first, as the naive references above
    return learn_walls(model, tok, _zero_bank(model), TARGETS, CONTROLS, cfg, out, promote=True,
                       negatives=NEGATIVES, stop_at=stop_at, resume=resume, log=None)


def test_steer_learn_promotes_on_held_out_prompts_under_the_budget(tiny_model, tmp_path):
    model, tok = tiny_model("llama")
    stock_t = _naive_logprob(model, tok, TARGETS)
    stock_n = _naive_logprob(model, tok, NEGATIVES)
    _, rep = _steer(model, tok, tmp_path / "s")
    first = rep["history"][0]  # step 1 runs on the starting (identity) surfaces, KL ≈ 0 < τ: no penalty
    assert first["target_logprob"] == pytest.approx(float(stock_t.mean()), abs=1e-4)
    assert first["negative_logprob"] == pytest.approx(float(stock_n.mean()), abs=1e-4)
    assert first["loss"] == pytest.approx(-float(stock_t.mean() - stock_n.mean()), abs=2e-4)
    loaded = manifold.load(tmp_path / "s", model=model)
    after_t = _naive_logprob(model, tok, TARGETS, loaded)
    assert rep["train_eval"]["target_logprob"] == pytest.approx(float(after_t.mean()), abs=1e-4)
    assert rep["train_eval"]["target_gain"] == pytest.approx(float((after_t - stock_t).mean()), abs=2e-4)
    assert rep["train_eval"]["negative_drop"] > 0.1
    gain = _naive_logprob(model, tok, HELD_OUT, loaded) - _naive_logprob(model, tok, HELD_OUT)
    assert float(gain.mean()) > 0.1  # prompts it never saw: the target continuation is more likely
    kl_all, kl_last = _naive_kl(model, tok, CONTROLS, loaded)
    assert kl_all == pytest.approx(rep["train_eval"]["kl"], abs=1e-4)
    assert kl_all < TAU and kl_last < TAU
    assert max(_naive_kl(model, tok, HELD_OUT_CONTROLS, loaded)) < TAU
    doc = manifold.read_config(tmp_path / "s")
    assert "steer_learn" in doc["meta"] and "wall_learn" not in doc["meta"]
    assert "learn steering-surfaces: surfaces fine-tuned to promote" in (tmp_path / "s" / "README.md").read_text()


def test_neutral_start_and_checkpoints_stay_with_their_verb(tiny_model, tmp_path):
    """Before any step the surfaces are the starting ones (identity: the stock logits); a steer-learn
    checkpoint does not resume as wall-learn, nor a wall-learn one as steer-learn (one line, file kept)."""
    model, tok = tiny_model("llama")
    bank = _zero_bank(model)
    ids = tok(["A sentence to compare the logits on"], return_tensors="pt").input_ids
    with torch.no_grad():
        stock = model(ids, use_cache=False).logits
        with steer(model, bank):
            assert torch.allclose(model(ids, use_cache=False).logits, stock, atol=1e-5)
    _, part = _steer(model, tok, tmp_path / "s", stop_at=0)
    assert part["stopped"] and not (tmp_path / "s").exists()
    ckpt = tmp_path / "s.train" / "checkpoint.safetensors"
    saved = [t for k, t in load_file(ckpt).items() if "coefficients" in k]
    assert len(saved) == 1 and torch.equal(saved[0], bank.coefficients.detach())
    before = ckpt.read_bytes()
    cfg = WallLearnConfig(mode="dense", steps=3, lr=0.1, kl_threshold=TAU, checkpoint_every=1, add_bos=True)
    with pytest.raises(GeosteerError, match="belongs to another run") as ei:
        learn_walls(model, tok, _zero_bank(model), TARGETS, CONTROLS, cfg, tmp_path / "s", resume=True, log=None)
    assert len(str(ei.value).splitlines()) == 1 and ckpt.read_bytes() == before
    learn_walls(model, tok, _zero_bank(model), TARGETS, CONTROLS, cfg, tmp_path / "w", stop_at=0, log=None)
    with pytest.raises(GeosteerError, match="belongs to another run \\(negatives"):
        _steer(model, tok, tmp_path / "w", resume=True)
    with torch.no_grad():
        assert torch.equal(model(ids, use_cache=False).logits, stock)  # the model itself is untouched
    with pytest.raises(GeosteerError, match="mode dense"):
        _steer(model, tok, tmp_path / "x", mode="walls")
    with pytest.raises(GeosteerError, match="promote"):
        learn_walls(model, tok, bank, TARGETS, CONTROLS, cfg, tmp_path / "y", negatives=NEGATIVES, log=None)


def test_cli_steer_learn_artifact_through_the_recipe_and_bad_input(tiny_model, tmp_path, monkeypatch, capsys):
    from geosteer.recipe import InterventionSpec

    model, tok = tiny_model("llama")
    src = tmp_path / "src"
    manifold.save(_zero_bank(model), src)
    t, n, c = tmp_path / "t.json", tmp_path / "n.json", tmp_path / "c.json"
    t.write_text(json.dumps(TARGETS))
    n.write_text(json.dumps(NEGATIVES))
    c.write_text(json.dumps(CONTROLS))
    base = ["learn", "steering-surfaces", "--surfaces", str(src), "--target-file", str(t), "--control-file", str(c),
            "--model", "tiny-llama", "--threads", "1"]
    code, out, err = run_cli(monkeypatch, capsys, *base, "--negative-file", str(n), "--out", str(tmp_path / "o"),
                             "--steps", "1", "--lr", "0.1", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["target_gain"] > 0 and doc["negative_drop"] > 0
    assert manifold.read_config(tmp_path / "o")["meta"]["command"].startswith("geosteer learn steering-surfaces ")
    ids = tok(["The cat sat on the"], return_tensors="pt").input_ids
    with torch.no_grad(), steer(model, *InterventionSpec(surfaces=str(tmp_path / "o")).build(model)):
        via_recipe = model(ids, use_cache=False).logits
    with torch.no_grad(), steer(model, manifold.load(tmp_path / "o", model=model)):
        direct = model(ids, use_cache=False).logits
    assert torch.equal(via_recipe, direct)
    user = tmp_path / "mine"
    user.mkdir()
    (user / "notes.txt").write_text("keep me")
    empty, blank = tmp_path / "e.json", tmp_path / "b.json"
    empty.write_text("[]")
    blank.write_text(json.dumps([{"prompt": "x", "target": ""}]))
    outs = ["--out", str(tmp_path / "o2")]
    for extra in (["--kl-threshold", "0", *outs], ["--lr", "-1", *outs], ["--steps", "0", *outs],
                  ["--target-file", str(empty), *outs], ["--control-file", str(empty), *outs],
                  ["--negative-file", str(blank), *outs], ["--negative-file", str(tmp_path / "none.json"), *outs],
                  ["--resume", "--overwrite", *outs], ["--out", str(user)]):
        refused_before_load(monkeypatch, capsys, *base, *extra)
    assert (user / "notes.txt").read_text() == "keep me" and sorted(p.name for p in user.iterdir()) == ["notes.txt"]
    assert not (tmp_path / "o2").exists()
