"""The steering-frontier study on a tiny model: every lever's records carry the fields, the neutral point is
exactly zero shift and zero KL, a CAA point's shift and KL equal a naive recomputation (vector from
``output_hidden_states``, added by a plain forward hook, one unpadded float64 forward per prompt), the
bootstrap interval matches the normal one on a large sample, the matched-KL comparison on hand-made points,
a killed run resumes from its cache, and bad input is one line before the model loads."""

import json
import math

import numpy as np
import pytest
import torch

from geosteer import manifold
from geosteer.manifold.artifact import save
from geosteer_paper.vectors.frontier import RECORD_FIELDS, Behaviour, bootstrap_ci, interpolate_at, matched_kl
from geosteer_paper.vectors.frontier_study import Plan, run_frontier
from tests.cli_helpers import refused_before_load

PROMPTS = ["The cat sat on the", "Paris is the capital of", "One, two, three,", "I think that the answer is"]
HELD_OUT = ["The dog ran to the", "My favourite colour is", "We went to the"]
CONTROLS = ["Berlin is a city in", "Red, green and", "She opened the door and", "A long time ago"]
HELD_OUT_CONTROLS = ["The sun rises in the", "He said that", "Seven plus one is"]
PLAN = dict(caa_layers=(1,), caa_multipliers=(1.0, 4.0), steer_taus=(0.05, 0.5), steer_steps=1,
            wall_taus=(0.05,), wall_steps=1, edit_top=2, edit_strengths=(1.0, 2.0), dir_par=(0.5,),
            dir_perp=(), ffn_gains=(0.5,), scale_taus=(0.05,), scale_steps=1, ppl_tokens=48, ppl_context=16)


def _behaviour() -> Behaviour:
    def items(ps, t):
        return [{"prompt": p, "target": t} for p in ps]
    return Behaviour("toy", 1, items(PROMPTS, " yes"), items(HELD_OUT, " yes"), CONTROLS, HELD_OUT_CONTROLS,
                     items(PROMPTS, " no"), items(HELD_OUT, " no"))


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    from geosteer import load_model

    torch.manual_seed(0)
    model, tok = load_model("tiny-llama")
    bank = manifold.install(model, grid_size=4, layers=[1, 2])
    manifold.uninstall(model)
    with torch.no_grad():  # non-zero surfaces: the edits lever has something to scale
        bank.coefficients.normal_(0, 0.3, generator=torch.Generator().manual_seed(0))
    tmp = tmp_path_factory.mktemp("frontier")
    save(bank, tmp / "surf")
    res = run_frontier(model, tok, [_behaviour()], Plan(**PLAN), tmp / "cache", surfaces=str(tmp / "surf"),
                       log=None)
    return model, tok, tmp, res


def _ids(tok, text):
    return [tok.bos_token_id] + tok(text, add_special_tokens=False).input_ids


def _naive(model, tok, bank, layer, vec):
    """Per held-out prompt: target log-prob change and last-position control KL, vector added at ``layer``."""
    def run(ids, add):
        def hook(mod, args, out):
            if not add:
                return None
            return (out[0] + vec,) + tuple(out[1:]) if isinstance(out, tuple) else out + vec
        h = model.model.layers[layer].register_forward_hook(hook)
        try:
            with torch.no_grad(), _steer(model, bank):
                return torch.log_softmax(model(torch.tensor([ids]), use_cache=False).logits[0].double(), -1)
        finally:
            h.remove()

    shifts, kls = [], []
    for p in HELD_OUT:
        pre, cont = _ids(tok, p), tok(" yes", add_special_tokens=False).input_ids
        a, b = run(pre + cont, False), run(pre + cont, True)
        shifts.append(float(sum(b[len(pre) - 1 + j, c] - a[len(pre) - 1 + j, c] for j, c in enumerate(cont))))
    for p in HELD_OUT_CONTROLS:
        a, b = run(_ids(tok, p), False)[-1], run(_ids(tok, p), True)[-1]
        kls.append(float((a.exp() * (a - b)).sum()))
    return np.mean(shifts), np.mean(kls)


def _steer(model, bank):
    from geosteer.interventions import steer

    return steer(model, bank)


def test_records_fields_and_neutral_point(study):
    _, _, _, res = study
    recs = res["records"]
    levers = {r["lever"] for r in recs}
    assert {"reference", "stock model", "CAA", "learned steering surfaces", "learned walls", "surfaces edits",
            "directional ∥/⊥", "learned ∥/⊥ scales", "FFN edits"} <= levers
    for r in recs:
        assert set(RECORD_FIELDS) <= set(r), r["lever"]
        assert r["n_target"] == len(HELD_OUT) and r["n_control"] == len(HELD_OUT_CONTROLS)
        assert r["target_shift_lo"] <= r["target_shift"] + 1e-9 <= r["target_shift_hi"] + 2e-9
        assert r["control_kl"] >= -1e-7 and math.isfinite(r["ppl"])
    for lever in levers - {"reference", "stock model", "learned walls", "learned ∥/⊥ scales"}:  # one run each
        assert sum(r["lever"] == lever for r in recs) >= 2, lever
    neutral = next(r for r in recs if r["lever"] == "reference")
    assert neutral["target_shift"] == 0 and neutral["control_kl"] == 0 and neutral["ppl_ratio"] == 1
    # the learned steering surfaces are compared with CAA at their own control KL
    assert [m["setting"] for m in res["matched_kl"]] == [r["setting"] for r in recs
                                                        if r["lever"] == "learned steering surfaces"]


def test_caa_point_equals_naive_recomputation(study):
    model, tok, tmp, res = study
    bank = manifold.load(tmp / "surf", model=model)
    rec = next(r for r in res["records"] if r["lever"] == "CAA" and r["strength"] == 4.0)

    def mean_last(texts):  # the prompts encoded as the tokenizer does by default (as extract documents)
        hs = []
        for t in texts:
            with torch.no_grad(), _steer(model, bank):
                out = model(torch.tensor([tok(t).input_ids]), output_hidden_states=True, use_cache=False)
            hs.append(out.hidden_states[2][0, -1])
        return torch.stack(hs).mean(0)

    vec = mean_last([p + " yes" for p in PROMPTS]) - mean_last([p + " no" for p in PROMPTS])
    assert rec["extra"]["vector_norm"] == pytest.approx(float(vec.norm()), rel=1e-4)
    shift, kl = _naive(model, tok, bank, 1, 4.0 * vec)
    assert rec["target_shift"] == pytest.approx(shift, abs=2e-4)
    assert rec["control_kl"] == pytest.approx(kl, abs=2e-5)


def test_run_resumes_from_cache(study, capsys):
    model, tok, tmp, res = study
    lines = []
    again = run_frontier(model, tok, [_behaviour()], Plan(**PLAN), tmp / "cache", surfaces=str(tmp / "surf"),
                         log=lines.append)
    assert lines == []  # every point came from the cache, no training run started again
    assert json.dumps(again["records"], sort_keys=True) == json.dumps(res["records"], sort_keys=True)
    more = Plan(**{**PLAN, "steer_taus": (0.05, 0.5, 0.9)}, cached_only=True)  # one point never measured
    lines.clear()
    assembled = run_frontier(model, tok, [_behaviour()], more, tmp / "cache", surfaces=str(tmp / "surf"),
                             log=lines.append)
    assert len(lines) == 1 and "tau 0.9" in lines[0] and "left out" in lines[0]
    assert len(assembled["records"]) == len(res["records"])
    assert not (tmp / "cache" / "runs" / "toy-dense-tau0.9").exists()


def test_bootstrap_interval_matches_normal_interval():
    x = np.random.default_rng(1).normal(2.0, 3.0, size=4000)
    lo, hi = bootstrap_ci(x, n_boot=4000, seed=0)
    half = 1.96 * x.std(ddof=1) / math.sqrt(x.size)
    assert lo == pytest.approx(x.mean() - half, abs=0.15 * half)
    assert hi == pytest.approx(x.mean() + half, abs=0.15 * half)


def test_matched_kl_on_hand_made_points():
    # one CAA layer path: (KL, shift) = (0.1, 1.0), (0.4, 2.0); learned point at KL 0.25, shift 1.6
    assert interpolate_at([(0.1, 1.0), (0.4, 2.0)], 0.25) == pytest.approx(1.5)
    assert interpolate_at([(0.1, 1.0)], 0.3) is None
    base = {"behaviour": "b", "layer": 3, "target_shift_lo": 0, "target_shift_hi": 0}
    recs = [{**base, "lever": "CAA", "setting": "x1", "strength": 1, "control_kl": 0.1, "target_shift": 1.0},
            {**base, "lever": "CAA", "setting": "x2", "strength": 2, "control_kl": 0.4, "target_shift": 2.0},
            {**base, "lever": "learned steering surfaces", "setting": "t", "strength": 0.1, "control_kl": 0.25,
             "target_shift": 1.6, "target_shift_lo": 1.55}]
    (m,) = matched_kl(recs, "learned steering surfaces")
    assert m["CAA_best_at_or_below"] == 1.0 and m["CAA_interpolated"] == pytest.approx(1.5)
    assert m["ahead"] and m["ahead_by_interval"]


@pytest.mark.parametrize("args,needle", [
    (["--reuse", "sentiment:dense=x"], "--reuse"),
    (["--caa-multipliers", "a,b"], "--caa-multipliers"),
    (["--behaviours", "weather"], "unknown behaviour"),
    (["--levers", "CAA,magic"], "unknown lever"),
    (["--surfaces", "no/such/folder"], "--surfaces"),
])
def test_bad_input_is_one_line_before_load(monkeypatch, capsys, tmp_path, args, needle):
    line = refused_before_load(monkeypatch, capsys, "study", "vectors", "frontier", "--cache",
                               str(tmp_path / "c"), "--out", str(tmp_path / "f.json"), *args)
    assert needle in line
