"""Learned walls (issue 16 item 4): the soft relaxation against a naive per-pair reference, its hard form
against the exact walls, the attribution scores against finite differences, the end-to-end run (artifact,
card, loadable, its numbers recomputed), exact resume after a kill, and bad input (one line, exit 2)."""

import json
import math

import pytest
import torch

from geosteer import manifold
from geosteer.attention import attention_weights, repeat_kv
from geosteer.errors import GeosteerError
from geosteer.interventions import steer
from geosteer.kernels.bspline import bspline_basis
from geosteer.manifold.wall_learn import (
    SoftWalls,
    WallLearnConfig,
    encode_controls,
    encode_targets,
    read_controls,
    read_targets,
    target_logprob,
)
from geosteer.manifold.wall_learn_train import learn_walls
from tests.cli_helpers import one_line_exit_2, run_cli
from tests.manifold.test_walls import _bank, _Capture

TARGETS = [{"prompt": "The cat sat on the", "target": " mat"},
           {"prompt": "Paris is the capital of", "target": " France today"},
           {"prompt": "One, two, three,", "target": " four"}]
CONTROLS = ["The dog ran to the", "Berlin is a city in", "Red, green and", "She opened the door and"]


def _cands(layer=1):
    return [{"layer": layer, "head": 0, "dim": 1, "q": [-0.3, 0.4], "k": [-0.2, 0.5], "q_scale": 0.3,
             "k_scale": 0.3},
            {"layer": layer, "head": 1, "dim": 3, "q": [-1.0, 0.0], "k": [0.0, 1.0], "q_scale": 0.5,
             "k_scale": 0.5}]


def _sig(x):
    return 1 / (1 + torch.exp(-x))


@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt2"])
def test_soft_walls_match_naive_reference(tiny_model, family):
    """o_id = Σ_j a_ij v_jd (1 + S)(1 − g m_Q(q_id) m_K(k_jd)) on the candidate channels, float64 loops."""
    model, tok = tiny_model(family)
    bank = _bank(model)
    layer = bank.layers[1]
    soft = SoftWalls(_cands(layer), bank=bank, temperature=0.5)
    with torch.no_grad():
        soft.gate.copy_(torch.tensor([0.7, -0.4]))
    ids = tok(["The theory of relativity states that"], return_tensors="pt").input_ids
    cap = _Capture(layer)
    with torch.no_grad(), steer(model, cap, soft, bank):
        model(ids, use_cache=False)
    (call, out), = cap.calls
    with torch.no_grad(), steer(model, cap, bank):
        model(ids, use_cache=False)
    ref_out = cap.calls[1][1]
    a = attention_weights(call).double()
    q = call.query.double()
    k, v = repeat_kv(call.key, call.n_rep).double(), repeat_kv(call.value, call.n_rep).double()
    slot = bank.slot(layer)
    lo, hi = float(bank.lo[slot]), float(bank.hi[slot])
    expect = ref_out.double().clone()
    for i, c in enumerate(soft.cands):
        h, dd = c["head"], c["dim"]
        C = bank.coefficients[slot, h, dd].detach().double()
        gain = 1 + bspline_basis(q[:, h, :, dd], bank.grid_size, lo, hi) @ C @ \
            bspline_basis(k[:, h, :, dd], bank.grid_size, lo, hi).transpose(-1, -2)
        tq, tk = 0.5 * c["q_scale"], 0.5 * c["k_scale"]
        mq = _sig((q[:, h, :, dd] - c["q"][0]) / tq) * _sig((c["q"][1] - q[:, h, :, dd]) / tq)
        mk = _sig((k[:, h, :, dd] - c["k"][0]) / tk) * _sig((c["k"][1] - k[:, h, :, dd]) / tk)
        g = float(_sig(soft.gate[i].detach().double()))
        keep = 1 - g * mq[:, :, None] * mk[:, None, :]
        expect[:, :, h, dd] = torch.einsum("bij,bj,bij->bi", a[:, h], v[:, h, :, dd], gain * keep)
    assert torch.allclose(out.double(), expect, atol=2e-5, rtol=1e-4)
    other = torch.ones(out.shape[2:], dtype=torch.bool)
    for c in soft.cands:
        other[c["head"], c["dim"]] = False
    assert torch.equal(out[:, :, other], ref_out[:, :, other])  # other channels untouched


def test_hard_mode_equals_exact_walls(tiny_model):
    """hard=True (indicator boxes, gates > 0.5) gives the logits of the bank with the hardened exact walls."""
    model, tok = tiny_model("llama")
    bank = _bank(model)
    soft = SoftWalls(_cands(bank.layers[0]) + _cands(bank.layers[1])[:1], bank=bank)
    with torch.no_grad():
        soft.gate.copy_(torch.tensor([2.0, -2.0, 1.0]))
        soft.q_lo[2] = 0.3  # lo >= hi after learning: dropped by harden, blocks nothing in hard mode
        soft.q_hi[2] = 0.1
    soft.hard = True
    ids = tok(["A long sentence about walls and surfaces, with more words"], return_tensors="pt").input_ids
    with torch.no_grad(), steer(model, soft, bank):
        got = model(ids, use_cache=False).logits
    walls = soft.harden()
    assert len(walls) == 1 and walls[0].heads == (0,) and all(w.q[0] < w.q[1] for w in walls)
    bank.set_walls(walls)
    with torch.no_grad(), steer(model, bank):
        want = model(ids, use_cache=False).logits
    bank.set_walls([])
    with torch.no_grad(), steer(model, bank):
        unwalled = model(ids, use_cache=False).logits
    assert torch.allclose(got, want, atol=1e-5)
    assert not torch.allclose(got, unwalled, atol=1e-5)  # the wall does something here


def test_attribution_matches_finite_difference(tiny_model):
    """The candidate score's drop Σ_i g_id o_id equals −d/dε log p(target) when channel (h, d) is scaled by
    (1 − ε), by central differences."""
    from geosteer.attention import attach_handlers
    from geosteer.manifold.wall_learn_candidates import _attribution

    model, tok = tiny_model("llama")
    bank = _bank(model)
    tb = encode_targets(tok, TARGETS)
    layer = bank.layers[0]
    _, eff = _attribution(model, bank, tb, [layer], lambda lg: target_logprob(lg, tb))
    h, dd = 1, 2

    class Scale:
        def __init__(self, eps):
            self.eps = eps

        def attach(self, m):
            def make(_):
                def handler(call, proceed):
                    out, w = proceed(call)
                    out = out.clone()
                    out[:, :, h, dd] *= 1 - self.eps
                    return out, w
                return handler
            return attach_handlers(m, [layer], make)

    def lp(eps):
        with torch.no_grad(), steer(model, Scale(eps), bank):
            return target_logprob(model(tb.ids, use_cache=False).logits.double(), tb)

    eps = 1e-2
    fd = (lp(-eps) - lp(eps)) / (2 * eps)  # = Σ g·o per sample
    assert torch.allclose(eff[:, 0, h, dd].double(), fd.double(), rtol=2e-2, atol=1e-4)


def _learn(model, tok, out, **kw):
    bank = _bank(model)
    stop_at = kw.pop("stop_at", None)
    resume = kw.pop("resume", False)
    cfg = WallLearnConfig(**{"candidates": 4, "steps": 4, "lr": 0.2, "checkpoint_every": 1,
                             "kl_threshold": 0.05, "sparsity": 0.01, **kw})
    return learn_walls(model, tok, bank, TARGETS, CONTROLS, cfg, out, stop_at=stop_at, resume=resume, log=None)


def test_learn_walls_end_to_end(tiny_model, tmp_path):
    model, tok = tiny_model("llama")
    bank, rep = _learn(model, tok, tmp_path / "w", gate_init=3.0)
    assert len(rep["candidates"]) == 4 and len(rep["history"]) == 4
    assert rep["regions"], "gates start open: some region should survive"
    loaded = manifold.load(tmp_path / "w", model=model)
    assert [w.to_dict() for w in loaded.walls] == rep["regions"]
    card = (tmp_path / "w" / "README.md").read_text()
    assert rep["regions_text"][0] in card  # the card lists the learned regions
    cfg_doc = manifold.read_config(tmp_path / "w")
    assert cfg_doc["meta"]["wall_learn"]["regions"] == rep["regions"]
    # the reported training-set drop, recomputed independently from the saved artifact
    tb = encode_targets(tok, TARGETS, add_bos=None)  # as the run encodes them: the tokenizer's way
    plain = _bank(model)
    with torch.no_grad(), steer(model, plain):
        before = target_logprob(model(tb.ids, use_cache=False).logits, tb)
    with torch.no_grad(), steer(model, loaded):
        after = target_logprob(model(tb.ids, use_cache=False).logits, tb)
    assert math.isclose(float((before - after).mean()), rep["train_eval"]["target_drop"], rel_tol=1e-4,
                        abs_tol=1e-5)


def test_dense_mode_trains_the_surfaces(tiny_model, tmp_path):
    model, tok = tiny_model("llama")
    bank, rep = _learn(model, tok, tmp_path / "d", mode="dense", steps=2, lr=0.05)
    assert rep["train_eval"]["target_drop"] > 0  # two steps of descent on the target log-prob
    assert not torch.equal(manifold.load(tmp_path / "d").coefficients, _bank(model).coefficients)


def test_resume_after_kill_is_exact(tiny_model, tmp_path):
    model, tok = tiny_model("llama")
    _, full = _learn(model, tok, tmp_path / "a", gate_init=1.0)
    _, part = _learn(model, tok, tmp_path / "b", gate_init=1.0, stop_at=0)  # killed right after scoring
    assert part["stopped"]
    _learn(model, tok, tmp_path / "b", gate_init=1.0, stop_at=3, resume=True)
    _, res = _learn(model, tok, tmp_path / "b", gate_init=1.0, resume=True)
    assert res["gates"] == full["gates"] and res["boxes"] == full["boxes"]
    assert res["regions"] == full["regions"] and res["candidates"] == full["candidates"]
    assert [h["loss"] for h in res["history"]] == [h["loss"] for h in full["history"]]
    with pytest.raises(GeosteerError, match="already exists"):
        _learn(model, tok, tmp_path / "b")


def test_resume_refuses_a_checkpoint_of_other_surfaces(tiny_model, tmp_path):
    """The checkpoint records the surfaces it learns walls on (a digest) and the base model: resuming on
    other surfaces is refused naming the field, before the checkpoint's candidates are used."""
    model, tok = tiny_model("llama")
    _learn(model, tok, tmp_path / "w", gate_init=1.0, stop_at=0, layers=[0], candidates=2)
    ckpt = tmp_path / "w.train" / "checkpoint.safetensors"
    before = ckpt.read_bytes()
    other = _bank(model)
    with torch.no_grad():
        other.coefficients.mul_(2.0)
    cfg = WallLearnConfig(candidates=2, steps=4, lr=0.2, checkpoint_every=1, kl_threshold=0.05, sparsity=0.01,
                          gate_init=1.0, layers=[0])
    with pytest.raises(GeosteerError, match="belongs to another run \\(surfaces: checkpoint") as ei:
        learn_walls(model, tok, other, TARGETS, CONTROLS, cfg, tmp_path / "w", resume=True, log=None)
    assert len(str(ei.value).splitlines()) == 1 and ckpt.read_bytes() == before


def test_bad_input_api(tiny_model, tmp_path):
    model, tok = tiny_model("llama")
    for kw in ({"kl_threshold": 0.0}, {"kl_threshold": -1.0}, {"kl_threshold": math.nan}, {"mode": "x"},
               {"temp_start": 0.01, "temp_end": 0.1}, {"quantiles": (0.9, 0.1)}):
        with pytest.raises(GeosteerError):
            WallLearnConfig(**kw)

    class Tok:
        bos_token_id, pad_token_id, eos_token_id = 1, 0, 2

        def __call__(self, text, add_special_tokens=False):
            return type("E", (), {"input_ids": [] if text == " \u200b" else [5, 6]})()

    with pytest.raises(GeosteerError, match="tokenises to nothing"):
        encode_targets(Tok(), [{"prompt": "a", "target": " \u200b"}])
    with pytest.raises(GeosteerError, match="tokenises to nothing"):
        encode_controls(Tok(), [" \u200b"])
    for content, fn, msg in (([], read_targets, "empty"), ([], read_controls, "empty"),
                             ([{"prompt": "a", "target": ""}], read_targets, "empty target"),
                             ([{"prompt": "a"}], read_targets, "target"), (["", "b"], read_controls, "item 0")):
        p = tmp_path / "f.json"
        p.write_text(json.dumps(content))
        with pytest.raises(GeosteerError, match=msg):
            fn(p)


def test_cli_wall_learn_and_bad_input(tiny_model, tmp_path, monkeypatch, capsys):
    model, tok = tiny_model("llama")
    src = tmp_path / "s"
    manifold.save(_bank(model), src)
    t, c = tmp_path / "t.json", tmp_path / "c.json"
    t.write_text(json.dumps(TARGETS))
    c.write_text(json.dumps(CONTROLS))
    base = ["learn", "walls", "--surfaces", str(src), "--target-file", str(t), "--control-file",
            str(c), "--out", str(tmp_path / "o"), "--model", "tiny-llama", "--threads", "1"]
    code, out, err = run_cli(monkeypatch, capsys, *base, "--steps", "2", "--candidates", "3", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert len(manifold.load(tmp_path / "o").walls) == len(doc["regions"])
    empty = tmp_path / "e.json"
    empty.write_text("[]")
    blank = tmp_path / "b.json"
    blank.write_text(json.dumps([{"prompt": "x", "target": ""}]))
    for extra in (["--kl-threshold", "0"], ["--kl-threshold", "-0.5"], ["--target-file", str(empty)],
                  ["--control-file", str(empty)], ["--target-file", str(blank)], ["--layers", "5-2"],
                  ["--mode", "nope"]):
        code, _, err = run_cli(monkeypatch, capsys, *base, *extra)
        one_line_exit_2(code, err)
    code, _, err = run_cli(monkeypatch, capsys, "manifold", "edit", "wall layer=1 q=2..1", "--surfaces",
                           str(src), "--out", str(tmp_path / "x"))
    one_line_exit_2(code, err)  # a region with lo >= hi
    assert not (tmp_path / "x").exists()
