"""The edit protocol's records against plain computations: a value-path edit made by hand on a copy of the
weights (numpy neuron choice, numpy KL), the transfer fit against scipy, the ablation against a hook that
zeroes the channels; the study's bad input (one line, exit 2, before the model loads) and its resume."""

import copy
import json

import numpy as np
import pytest
import torch
from scipy import stats

from geosteer.interventions import steer
from geosteer_paper.dynamics import weight_edits as we
from geosteer_paper.dynamics.edit_protocol import ProtocolConfig, edit_protocol
from tests.cli_helpers import refused_before_load, run_cli
from tests.conftest import random_ids

LAYER, SIZES, N = 1, (0.5, 1.0, 2.0), 6


@pytest.fixture(scope="module")
def tiny(tiny_model):
    return tiny_model("llama")


@pytest.fixture(scope="module")
def run(tiny):
    model, _ = tiny
    prompts, held = random_ids(2, 6, seed=7, low=3, high=300), random_ids(1, 6, seed=8, low=3, high=300)
    cfg = ProtocolConfig(sizes=SIZES, neurons=N, ks=(4,), seeds=(0,), sites=("value", "random"), target_rank=3)
    return prompts, held, edit_protocol(model, prompts, held, [LAYER], cfg)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _kl(p_logits: np.ndarray, q_logits: np.ndarray) -> np.ndarray:
    lp, lq = _log_softmax(p_logits), _log_softmax(q_logits)
    return (np.exp(lp) * (lp - lq)).sum(-1)


def test_value_edits_match_a_hand_made_weight_edit(tiny, run):
    model, _ = tiny
    prompts, held, res = run
    got = {}
    down = model.model.layers[LAYER].mlp.down_proj
    h = down.register_forward_pre_hook(lambda m, a: got.__setitem__("a", a[0][:, -1].double().numpy()))
    with torch.no_grad():
        stock = model(prompts).logits[:, -1].double().numpy()
        h.remove()
        stock_held = model(held).logits.double().numpy()
    w_u = model.lm_head.weight.detach().double().numpy()
    edited = copy.deepcopy(model)
    w0 = down.weight.detach().double().numpy()
    for b in range(2):
        t = int(np.argsort(-stock[b], kind="stable")[3])
        a = got["a"][b]
        chosen = np.argsort(-np.abs(a))[:N]
        w = np.zeros_like(a)
        w[chosen] = a[chosen]
        u = w_u[t] / np.linalg.norm(w_u[t])
        dzs = []
        for s in SIZES:
            with torch.no_grad():
                edited.model.layers[LAYER].mlp.down_proj.weight.copy_(
                    torch.from_numpy(w0 + s * np.outer(u, w / np.linalg.norm(w))))
                new = edited(prompts[b: b + 1]).logits[0, -1].double().numpy()
                new_held = edited(held).logits.double().numpy()
            rec = next(r for r in res["edits"] if (r["site"], r["size"], r["prompt"]) == ("value", s, b))
            assert rec["target"] == t
            # float32 logits of size ~1-10: each rounds at ~1e-6, the two forwards sum in other orders
            assert rec["dz"] == pytest.approx(new[t] - stock[b, t], abs=1e-4)
            assert rec["kl_heldout"] == pytest.approx(_kl(stock_held, new_held).mean(), rel=1e-3, abs=1e-7)
            assert rec["kl_own"] == pytest.approx(_kl(stock[b], new), rel=1e-3, abs=1e-7)
            dzs.append(rec["dz"])
        fit = next(f for f in res["transfer"] if (f["site"], f["prompt"]) == ("value", b))
        ref = stats.linregress(SIZES, dzs)
        assert fit["slope"] == pytest.approx(ref.slope, rel=1e-9)
        assert fit["r2"] == pytest.approx(ref.rvalue ** 2, rel=1e-9)
        assert fit["efficiency"] == pytest.approx(dzs[0] / SIZES[0], rel=1e-12)


def test_random_baseline_uses_numpy_default_rng_directions(tiny, run):
    model, _ = tiny
    prompts, held, res = run
    probe, t_edit, _ = we.probe_layer(model, prompts, LAYER, 3, 0)
    d = torch.from_numpy(np.random.default_rng(0).standard_normal((2, model.config.hidden_size)))
    neurons = we.value_neurons(probe.act[:, -1], None, None, N, "activation")
    unit = we.unit_deltas(probe, "value", d, neurons)
    with torch.no_grad():
        base = model(prompts).logits[:, -1].double()
        with steer(model, we.GroupedWeightDelta(LAYER, "value", 2.0 * unit)):
            new = model(prompts).logits[:, -1].double()
    for b in range(2):
        rec = next(r for r in res["edits"] if (r["site"], r["seed"], r["size"], r["prompt"]) == ("random", 0, 2.0, b))
        t = int(t_edit[b])
        assert rec["dz"] == pytest.approx(float(new[b, t] - base[b, t]), abs=1e-4)


def test_ablation_matches_zeroing_the_channels(tiny, run):
    model, _ = tiny
    prompts, _, res = run
    probe, _, t_abl = we.probe_layer(model, prompts, LAYER, 3, 0)
    score = (probe.act * probe.act_grad).sum(1).numpy()
    down = model.model.layers[LAYER].mlp.down_proj
    with torch.no_grad():
        base = model(prompts).logits[:, -1].double()
    for b in range(2):
        chosen = np.argsort(-score[b])[:4]

        def zero(m, args, chosen=chosen):
            x = args[0].clone()
            x[..., torch.from_numpy(chosen)] = 0.0
            return (x,)

        h = down.register_forward_pre_hook(zero)
        with torch.no_grad():
            new = model(prompts[b: b + 1]).logits[0, -1].double()
        h.remove()
        rec = next(r for r in res["ablation"] if (r["selection"], r["k"], r["prompt"]) == ("top", 4, b))
        t = int(t_abl[b])
        assert rec["target"] == t and rec["dz"] == pytest.approx(float(new[t] - base[b, t]), abs=1e-4)
    assert {(r["k"], r["selection"]) for r in res["ablation_overall"]} == {(4, "top"), (4, "random")}


EP = ("study", "dynamics", "edit-protocol", "-m", "tiny-llama")


@pytest.mark.parametrize("args, needle", [
    (("--sizes", "0,1"), "edit sizes must be >= 2 different"),
    (("--neurons", "4096", "--ks", "4"), "--neurons 4096 exceeds the FFN width 128"),
    (("--ks", "4,x"), "bad --ks '4,x'"),
    (("--sites", "value,sideways"), "unknown edit site (--sites) 'sideways'"),
    (("--layers", "7"), "layer 7 out of range"),
])
def test_bad_input_is_refused_before_the_model_loads(monkeypatch, capsys, tmp_path, args, needle):
    monkeypatch.chdir(tmp_path)
    width = () if "--ks" in args or "--neurons" in args else ("--ks", "4")  # the defaults exceed tiny widths
    assert needle in refused_before_load(monkeypatch, capsys, *EP, *args, *width, "--out", "r.json")
    assert list(tmp_path.iterdir()) == []


def test_checkpoint_resumes_and_refuses_another_run(monkeypatch, capsys, tmp_path):
    ck, out = tmp_path / "ck.json", tmp_path / "r.json"
    small = ("--layers", "0", "--sizes", "0.5,1", "--ks", "2", "--neurons", "2", "--seeds", "1", "--prompts", "1",
             "--context", "6", "--sites", "value", "--checkpoint", str(ck))
    code, _, err = run_cli(monkeypatch, capsys, *EP, *small, "--out", str(out))
    assert code == 0, err
    first = json.loads(out.read_text())["rows"]

    def measured(*a, **k):
        raise AssertionError("a finished layer was measured again")

    monkeypatch.setattr(we, "probe_layer", measured)
    code, _, err = run_cli(monkeypatch, capsys, *EP, *small, "--out", str(out))
    assert code == 0, err
    assert json.loads(out.read_text())["rows"] == first
    other = [a if a != "0.5,1" else "0.5,2" for a in small]
    assert "holds another run" in refused_before_load(monkeypatch, capsys, *EP, *other)


def test_rome_site_matches_a_hand_made_whitened_edit(tiny):
    """The rome rows' dz equals the target-logit change of the down projection edited by hand with
    s·û ŵᵀ, ŵ = unit((C + λI)⁻¹ a), C from numpy over the cov windows; without cov windows it is refused."""
    from geosteer.errors import GeosteerError

    model, _ = tiny
    prompts, held = random_ids(2, 6, seed=7, low=3, high=300), random_ids(1, 6, seed=8, low=3, high=300)
    cov_ids = random_ids(3, 8, seed=9, low=3, high=300)
    cfg = ProtocolConfig(sizes=SIZES, neurons=N, ks=(4,), seeds=(0,), sites=("rome",), target_rank=3)
    res = edit_protocol(model, prompts, held, [LAYER], cfg, cov_windows=cov_ids)
    down = model.model.layers[LAYER].mlp.down_proj
    got = {}
    h = down.register_forward_pre_hook(lambda m, a: got.setdefault("k", []).append(a[0].double().numpy()))
    with torch.no_grad():
        model(cov_ids)
        stock = model(prompts).logits[:, -1].double().numpy()
    h.remove()
    k = got["k"][0].reshape(-1, got["k"][0].shape[-1])
    c = k.T @ k / k.shape[0]
    c += we.RIDGE * np.trace(c) / c.shape[0] * np.eye(c.shape[0])
    a = got["k"][1][:, -1]
    w_u = model.lm_head.weight.detach().double().numpy()
    for b in range(2):
        t = int(np.argsort(-stock[b], kind="stable")[3])
        w = np.linalg.solve(c, a[b])
        u = w_u[t] / np.linalg.norm(w_u[t])
        edited = copy.deepcopy(model)
        d = edited.model.layers[LAYER].mlp.down_proj
        with torch.no_grad():
            d.weight += torch.from_numpy(2.0 * np.outer(u, w / np.linalg.norm(w))).to(d.weight.dtype)
            z = edited(prompts[b:b + 1]).logits[0, -1, t].double().item()
        row = next(r for r in res["edits"] if r["site"] == "rome" and r["prompt"] == b and r["size"] == 2.0)
        assert row["dz"] == pytest.approx(z - stock[b, t], abs=2e-4)
    with pytest.raises(GeosteerError, match="cov_windows"):
        edit_protocol(model, prompts, held, [LAYER], cfg)
