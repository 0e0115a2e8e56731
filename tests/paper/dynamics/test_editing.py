"""Edit linearity (R² of the target move vs edit size) and down_col locality on other text, against
independent computations (scipy's regression, a hand-made weight edit and a plain forward)."""

import numpy as np
import pytest
import torch
from scipy import stats

from geosteer import load_model
from geosteer_paper.dynamics import editing
from tests.cli_helpers import one_line_exit_2, run_cli
from tests.conftest import random_ids


@pytest.fixture(scope="module")
def tiny(tiny_model):
    return tiny_model("llama")


def test_line_fit_matches_scipy():
    rng = np.random.default_rng(0)
    x = np.array([0.0, 0.25, 0.5, 1.0, 2.0])
    y = 1.7 * x + 0.3 * rng.standard_normal(5)
    slope, r2 = editing.line_fit(x, y)
    ref = stats.linregress(x, y)
    assert slope == pytest.approx(ref.slope, rel=1e-10)
    assert r2 == pytest.approx(ref.rvalue ** 2, rel=1e-10)
    assert np.isnan(editing.line_fit(x, np.zeros(5))[1])


def test_linearity_points_are_edit_study_moves_and_small_edits_are_linear(tiny):
    model, _ = tiny
    ids = random_ids(2, 6, seed=21, low=3, high=300)
    scales = (0.5, 1.0)
    fits, summ = editing.edit_linearity(model, ids, [1], ["ffn_out", "down_col"], scales=scales, seeds=[0])
    for s in scales:
        recs, _ = editing.edit_study(model, ids, [1], ["ffn_out", "down_col"], scale=s, seeds=[0])
        for r in recs:
            f = next(f for f in fits if all(f[k] == r[k] for k in ("kind", "edit", "seed", "prompt")))
            assert f[f"move_s{s:g}"] == pytest.approx(r["target_move"], rel=1e-9, abs=1e-12)
    for f in fits:
        y = [0.0, f["move_s0.5"], f["move_s1"]]
        assert f["r2"] == pytest.approx(stats.linregress([0, 0.5, 1], y).rvalue ** 2, rel=1e-8)
    want = {(k, e) for k in ("ffn_out", "down_col") for e in ("target", "random")}
    assert {(s["kind"], s["edit"]) for s in summ} == want
    # in the first-order regime (float64 model, tiny edits) the move is linear in the edit size
    m64, _ = load_model("tiny-llama", dtype="float64")
    tiny_fits, _ = editing.edit_linearity(m64, ids, [1], ["ffn_out"], scales=(1e-4, 2e-4, 4e-4), seeds=[0])
    assert min(f["r2"] for f in tiny_fits) > 0.9999  # (HF norms compute in float32: noise floor ~1e-7)


def test_down_col_locality_matches_a_hand_made_weight_edit(tiny):
    model, _ = tiny
    ids, other = random_ids(2, 6, seed=22, low=3, high=300), random_ids(3, 7, seed=23, low=3, high=300)
    layer, scale, rank = 2, 0.8, 3
    recs, summ = editing.down_col_locality(model, ids, other, [layer], scale=scale, target_rank=rank, seeds=[0])
    mlp = model.model.layers[layer].mlp
    got = {}
    h = mlp.down_proj.register_forward_hook(lambda m, a, o: got.update(a=a[0][:, -1].double().clone(),
                                                                         y=o[:, -1].double().clone()))
    with torch.no_grad():
        base = model(ids).logits[:, -1].double()
        h.remove()
        stock = torch.log_softmax(model(other).logits.double(), -1)
    w_u = model.get_output_embeddings().weight.detach().double()
    w = mlp.down_proj.weight
    keep = w.detach().clone()
    for b in range(2):
        t = int(np.argsort(-base[b].numpy(), kind="stable")[rank])
        j = int(got["a"][b].abs().argmax())
        v = scale * got["y"][b].norm() * w_u[t] / w_u[t].norm()
        try:
            with torch.no_grad():
                w[:, j] += (v / got["a"][b, j]).float()
                new = torch.log_softmax(model(other).logits.double(), -1)
                own = torch.log_softmax(model(ids[b:b + 1]).logits[0, -1].double(), -1)
        finally:
            with torch.no_grad():
                w.copy_(keep)
        kl = (stock.exp() * (stock - new)).sum(-1)
        p = torch.log_softmax(base[b], -1)
        r = next(r for r in recs if r["edit"] == "target" and r["prompt"] == b)
        assert r["neuron"] == j
        assert r["kl_other"] == pytest.approx(float(kl.mean()), rel=1e-3, abs=1e-7)
        assert r["kl_other_max"] == pytest.approx(float(kl.max()), rel=1e-3, abs=1e-7)
        assert r["kl_own"] == pytest.approx(float((p.exp() * (p - own)).sum()), rel=1e-3, abs=1e-7)
    assert {s["edit"] for s in summ} == {"target", "random"} and all(s["n"] == 2 for s in summ)


@pytest.mark.parametrize("argv, message", [
    (["edit-linearity", "--scales", "1"], "at least 2 different sizes"),
    (["edit-linearity", "--scales", "0,1"], "--scales must be finite and > 0"),
    (["edit-linearity", "--scales", "a,b"], "--scales must be numbers"),
    (["edit-locality", "--other", "0"], "--other must be >= 1"),
    (["edit-locality", "--scale", "0"], "scale must be finite and > 0"),
    (["edit-locality", "--layers", "9"], "out of range"),
])
def test_cli_bad_input_exits_2(monkeypatch, capsys, argv, message):
    code, _, err = run_cli(monkeypatch, capsys, "study", "dynamics", *argv, "-m", "tiny-llama")
    one_line_exit_2(code, err)
    assert message in err, err
