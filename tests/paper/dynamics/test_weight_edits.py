"""Grouped weight edits against editing the weight itself; the probe's gradients against autograd on the weight
and finite differences; the value-edit construction against a plain forward hook; channel ablation against a
hook that zeroes the channels."""

import copy

import numpy as np
import pytest
import torch

from geosteer.interventions import steer
from geosteer_paper.dynamics import weight_edits as we
from tests.conftest import random_ids


@pytest.fixture(scope="module")
def tiny(tiny_model):
    return tiny_model("llama")


def _logits(model, ids, *ivs):
    with torch.no_grad(), steer(model, *ivs):
        return model(ids).logits.double()


def test_grouped_delta_equals_editing_the_weight(tiny):
    model, _ = tiny
    layer, ids = 1, random_ids(4, 4, seed=3, low=3, high=300)
    edited = copy.deepcopy(model)
    for site in ("value", "key", "attn_out"):  # key: a narrower (GQA) output; query is the same hook
        w = we.site_linear(model, layer, site).weight
        deltas = 0.05 * torch.randn((2, *w.shape), generator=torch.Generator().manual_seed(0))
        got = _logits(model, ids, we.GroupedWeightDelta(layer, site, deltas))
        lin = we.site_linear(edited, layer, site)
        for g in range(2):  # group g = rows 2g, 2g+1
            with torch.no_grad():
                lin.weight.copy_(w + deltas[g])
                ref = edited(ids[2 * g: 2 * g + 2]).logits.double()
            # float32 logits of magnitude ~1: each term rounds at ~1e-7, the two paths sum in other orders
            assert torch.allclose(got[2 * g: 2 * g + 2], ref, atol=2e-5, rtol=0), site
        with torch.no_grad():
            lin.weight.copy_(w)
    zeros = torch.zeros((2, *we.site_linear(model, layer, "value").weight.shape))
    zero = _logits(model, ids, we.GroupedWeightDelta(layer, "value", zeros))
    assert torch.equal(zero, _logits(model, ids))


def test_probe_gradients_match_autograd_on_the_weight(tiny):
    model, _ = tiny
    layer, ids = 1, random_ids(2, 6, seed=4, low=3, high=300)
    probe, t_edit, t_abl = we.probe_layer(model, ids, layer, edit_rank=3, ablate_rank=0)
    stock = _logits(model, ids)[:, -1]
    assert torch.equal(t_edit, stock.argsort(-1, descending=True)[:, 3])
    ref = copy.deepcopy(model)
    for site in ("query", "key"):
        weight = we.site_linear(ref, layer, site).weight
        weight.requires_grad_(True)
        for b in range(2):
            z = ref(ids[b: b + 1]).logits[0, -1, t_edit[b]]
            (g,) = torch.autograd.grad(z, weight)
            assert torch.allclose(probe.weight_grads[site][b], g.double(), atol=1e-5, rtol=1e-4)
        weight.requires_grad_(False)
    # attribution score Σ_t a_j ∂z/∂a_j against a finite difference: channel j scaled by (1 + eps) everywhere
    score = (probe.act * probe.act_grad).sum(1)
    down = we.site_linear(model, layer, "value")
    eps = 1e-2
    for b, j in ((0, int(score[0].abs().argmax())), (1, int(score[1].abs().argmax()))):
        def scale(m, args, j=j):
            x = args[0].clone()
            x[..., j] *= 1 + eps
            return (x,)
        h = down.register_forward_pre_hook(scale)
        try:
            z1 = _logits(model, ids[b: b + 1])[0, -1, t_abl[b]]
        finally:
            h.remove()
        fd = (z1 - stock[b, t_abl[b]]) / eps
        assert float(fd) == pytest.approx(float(score[b, j]), rel=0.05, abs=1e-4)


def test_value_edit_moves_the_last_position_by_s_times_the_active_norm(tiny):
    model, _ = tiny
    layer, ids, n, s = 2, random_ids(2, 7, seed=5, low=3, high=300), 8, 0.7
    probe, t_edit, _ = we.probe_layer(model, ids, layer, edit_rank=5, ablate_rank=0)
    a_last = probe.act[:, -1].numpy()
    neurons = we.value_neurons(probe.act[:, -1], None, None, n, "activation")
    for b in range(2):
        assert set(neurons[b].tolist()) == set(np.argsort(-np.abs(a_last[b]))[:n].tolist())
    u = torch.randn(2, model.config.hidden_size, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    unit = we.unit_deltas(probe, "value", u, neurons)
    assert torch.allclose(unit.flatten(1).norm(dim=-1), torch.ones(2, dtype=torch.float64))
    outside = torch.ones(2, unit.shape[-1], dtype=torch.bool).scatter(-1, neurons, False)
    assert float(unit.abs().sum(1)[outside].max()) == 0.0
    got = []
    mlp = model.model.layers[layer].mlp  # a llama MLP's output is its down projection's output
    with steer(model, we.GroupedWeightDelta(layer, "value", s * unit)):
        h = mlp.register_forward_hook(lambda m, a, o: got.append(o[:, -1].double().clone()))
        try:
            _logits(model, ids)
        finally:
            h.remove()
    h = mlp.register_forward_hook(lambda m, a, o: got.append(o[:, -1].double().clone()))
    try:
        _logits(model, ids)
    finally:
        h.remove()
    moved = got[0] - got[1]
    for b in range(2):
        a_s = np.linalg.norm(a_last[b][neurons[b].numpy()])
        want = s * a_s * u[b] / u[b].norm()
        assert torch.allclose(moved[b], want, atol=1e-5)


def test_channel_ablation_equals_zeroing_the_channels(tiny):
    model, _ = tiny
    layer, ids, k = 0, random_ids(2, 6, seed=6, low=3, high=300), 5
    m = we.site_linear(model, layer, "value").in_features
    channels = we.random_channels(3, 2, m, k)
    rng = np.random.default_rng(3)
    assert channels.tolist() == [rng.choice(m, size=k, replace=False).tolist() for _ in range(2)]
    w = we.site_linear(model, layer, "value").weight.detach().double()
    got = _logits(model, ids, we.GroupedWeightDelta(layer, "ablation", we.ablation_deltas(w, channels)))
    for b in range(2):
        def zero(mod, args, b=b):
            x = args[0].clone()
            x[..., channels[b]] = 0.0
            return (x,)
        h = we.site_linear(model, layer, "value").register_forward_pre_hook(zero)
        try:
            ref = _logits(model, ids[b: b + 1])
        finally:
            h.remove()
        assert torch.allclose(got[b: b + 1], ref, atol=2e-5, rtol=0)


def test_fused_projections_are_refused_in_one_line(tiny_model):
    from geosteer.errors import GeosteerError

    model, _ = tiny_model("gpt2")
    with pytest.raises(GeosteerError, match="separate nn.Linear"):
        we.site_linear(model, 0, "query")


def test_rome_edit_whitens_the_key_and_changes_other_keys_least(tiny_model):
    """The rome site: C from an independent hook equals key_second_moment; the edit is rank one of unit norm
    along (C + λI)⁻¹ a; among rank-one edits moving the output at a by the same vector, it has the smallest
    mean ‖ΔW k‖² + λ‖ΔW‖² over the keys C was estimated on (ROME's objective), below the value-neuron edit's."""
    model, _ = tiny_model("llama")
    ids = torch.randint(5, 900, (3, 12), generator=torch.Generator().manual_seed(0))
    keys = []
    h = we.site_linear(model, 1, "value").register_forward_pre_hook(
        lambda m, a: keys.append(a[0].detach().reshape(-1, a[0].shape[-1]).double()))
    with torch.no_grad():
        model(ids)
    h.remove()
    k = torch.cat(keys).numpy()
    cov = we.key_second_moment(model, 1, ids, batch_size=2)
    assert np.allclose(cov.numpy(), k.T @ k / k.shape[0], atol=1e-6 * np.abs(k).max() ** 2)
    probe, targets, _ = we.probe_layer(model, ids, 1, 3, 0)
    u = torch.randn(3, model.config.hidden_size, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    rome = we.unit_deltas(probe, "rome", u, torch.zeros(3, 2, dtype=torch.long), cov)
    a = probe.act[:, -1].numpy()
    c = cov.numpy()
    lam = we.RIDGE * np.trace(c) / c.shape[0]
    for b in range(3):
        w = np.linalg.solve(c + lam * np.eye(c.shape[0]), a[b])
        assert np.allclose(rome[b].numpy(), np.outer(u[b] / u[b].norm(), w / np.linalg.norm(w)), atol=1e-10)
        assert np.linalg.matrix_rank(rome[b].numpy(), tol=1e-8) == 1
    neurons = we.value_neurons(probe.act[:, -1], we.site_linear(model, 1, "value").weight.double(), u, 4,
                               "activation")
    value = we.unit_deltas(probe, "value", u, neurons)

    def cost(d, b):  # rescaled to move the output at a by exactly û: E‖ΔW k‖² + λ‖ΔW‖²
        d = d[b].numpy() / np.linalg.norm(d[b].numpy() @ a[b])
        return np.mean(np.sum((k @ d.T) ** 2, -1)) + lam * np.sum(d ** 2)

    for b in range(3):
        assert cost(rome, b) < cost(value, b)
    from geosteer.errors import GeosteerError

    with pytest.raises(GeosteerError, match="second moment"):
        we.unit_deltas(probe, "rome", u, neurons)
