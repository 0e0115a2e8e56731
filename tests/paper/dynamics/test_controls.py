"""Issue 13 item 4: the tangential commutator against its closed form on linear fields, the reordering study,
attention inverse temperature (neutral at 1, equal to scaled queries), diversity under pressure, gain by depth."""

import copy

import pytest
import torch

from geosteer import anatomy
from geosteer.dynamics.parallel import mean_loss
from geosteer.dynamics.variants import FFNVariant
from geosteer.errors import GeosteerError
from geosteer.interventions import steer
from geosteer_paper.dynamics.commutator import bracket_halves, normalised, reorder_study, tangential_field
from geosteer_paper.dynamics.pressure import (
    AttentionTemperature,
    depth_layers,
    gain_depth_sweep,
    pressure_study,
)
from tests.conftest import TINY_FAMILIES, sample_ids


def _closed_form_derivative(M, u, delta):
    """D(P_x̂ M x)·δ at a unit u along a tangent δ: Mδ − δ(uᵀMu) − u(δᵀMu) − u(uᵀMδ)."""
    return M @ delta - delta * (u @ M @ u) - u * (delta @ M @ u) - u * (u @ M @ delta)


def test_bracket_of_tangential_linear_fields_matches_closed_form():
    g = torch.Generator().manual_seed(0)
    d = 7
    A = torch.randn(d, d, generator=g, dtype=torch.float64)
    B = torch.randn(d, d, generator=g, dtype=torch.float64)
    a = tangential_field(lambda x: x @ A.T)
    b = tangential_field(lambda x: x @ B.T)
    for _ in range(3):
        u = torch.randn(d, generator=g, dtype=torch.float64)
        u = u / u.norm()
        at, bt = a(u[None])[0], b(u[None])[0]
        db_a, da_b = bracket_halves(a, b, u[None])
        torch.testing.assert_close(db_a[0], _closed_form_derivative(B, u, at))
        torch.testing.assert_close(da_b[0], _closed_form_derivative(A, u, bt))
        br = db_a[0] - da_b[0]
        assert abs(float(br @ u)) < 1e-10 * br.norm()  # the bracket of tangential fields is tangential
        # commuting case: B = polynomial in A => P_u-fields still need not commute, but B = c·A gives [a, ca] = 0
    c = tangential_field(lambda x: 2.5 * (x @ A.T))
    db, da = bracket_halves(a, c, u[None])
    assert (db - da).norm() < 1e-10


def test_normalised_commutator_is_scale_free():
    g = torch.Generator().manual_seed(1)
    d = 5
    A = torch.randn(d, d, generator=g, dtype=torch.float64)
    B = torch.randn(d, d, generator=g, dtype=torch.float64)

    def zero_hom(M):  # 0-homogeneous fields, like Φ behind an RMSNorm
        return tangential_field(lambda x: (x / x.norm(dim=-1, keepdim=True)) @ M.T)

    a, b = zero_hom(A), zero_hom(B)
    u = torch.randn(1, d, generator=g, dtype=torch.float64)
    vals = []
    for r in (1.0, 7.0):
        x = u / u.norm() * r
        db_a, da_b = bracket_halves(a, b, x)
        vals.append(normalised(db_a - da_b, a(x), b(x), x).item())
    assert vals[0] == pytest.approx(vals[1], rel=1e-10)


def test_reorder_study_runs_and_rejects_parallel_blocks(tiny_model):
    model, tok = tiny_model("llama")
    ids = sample_ids(tok)
    rows, summ = reorder_study(model, ids, [0, 1, 2])
    assert [r["layer"] for r in rows] == [0, 1, 2]
    for r in rows:
        assert r["commutator"] >= 0 and r["reorder_angle_deg"] >= 0 and r["tokens"] == ids.numel() - 2
    assert "rho_layers" in summ[0]
    neox, tok2 = tiny_model("gpt_neox")
    with pytest.raises(GeosteerError, match="sequential"):
        reorder_study(neox, sample_ids(tok2), [0])


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_neutral_temperature_reproduces_stock_logits(family, tiny_model):
    model, tok = tiny_model(family)
    ids = sample_ids(tok)
    with torch.no_grad():
        stock = model(ids).logits
        with steer(model, AttentionTemperature(1.0), FFNVariant("full")):
            out = model(ids).logits
        assert torch.equal(out, stock)
        with steer(model, AttentionTemperature(2.0, [0])):
            assert not torch.allclose(model(ids).logits, stock, atol=1e-5)
        assert torch.equal(model(ids).logits, stock)


def test_temperature_equals_scaled_queries(tiny_model):
    """β_A on the logits == the query projection multiplied by β_A (RoPE is linear): an independent path."""
    model, tok = tiny_model("llama")
    ids = sample_ids(tok)
    beta = 3.0
    ref = copy.deepcopy(model)
    with torch.no_grad():
        anatomy(ref).blocks[1].attn.q_proj.weight.mul_(beta)
        want = ref(ids).logits
        with steer(model, AttentionTemperature(beta, [1])):
            got = model(ids).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("beta", [0.0, -1.0, float("inf"), float("nan")])
def test_bad_beta(beta):
    with pytest.raises(GeosteerError, match="beta"):
        AttentionTemperature(beta)


def test_pressure_study_neutral_row_is_stock(tiny_model):
    model, tok = tiny_model("qwen2")
    ids = sample_ids(tok)
    rows, summ = pressure_study(model, ids, [1.0, 4.0], [1, 2], variants=("full", "zero"))
    stock = mean_loss(model, ids)
    s0 = [s for s in summ if s["beta"] == 1.0 and s["variant"] == "full"][0]
    assert s0["loss"] == pytest.approx(stock, rel=1e-6)
    assert len(rows) == 2 * 2 * anatomy(model).n_layers
    # independent D after the last block of the stock model
    from geosteer.dynamics.sphere import diversity, unit
    from geosteer.record import Recorder

    rec = Recorder(["resid_post"], [anatomy(model).n_layers - 1])
    with torch.no_grad(), steer(model, rec):
        model(ids)
    x = rec["resid_post", anatomy(model).n_layers - 1][0]
    want = diversity(unit(x[:, 1:].float())).mean().item()
    assert s0["D_final"] == pytest.approx(want, rel=1e-5)
    with pytest.raises(GeosteerError, match="unknown FFN variant"):
        pressure_study(model, ids, [1.0], [1], variants=("sideways",))
    _, g = pressure_study(model, ids, [1.0, 2.0], [1], variants=("full",), mode="gain")
    assert g[0]["loss"] == pytest.approx(stock, rel=1e-6) and g[1]["loss"] != pytest.approx(stock, rel=1e-6)
    with pytest.raises(GeosteerError, match="unknown pressure mode"):
        pressure_study(model, ids, [1.0], [1], mode="volume")


def test_gain_depth_sweep(tiny_model):
    model, tok = tiny_model("llama")
    ids = sample_ids(tok)
    assert depth_layers(3, [0, 0.5, 1]) == [0, 1, 2]
    with pytest.raises(GeosteerError):
        depth_layers(3, [1.5])
    rows = gain_depth_sweep(model, ids, [0.0, 1.0], [0.0, 1.0])
    assert [r["layer"] for r in rows] == [0, 0, 2, 2]
    stock = mean_loss(model, ids)
    zero2 = mean_loss(model, ids, 4, (FFNVariant("zero", [2]),))
    r = [r for r in rows if r["layer"] == 2 and r["alpha_ffn"] == 0.0][0]
    assert r["loss_increase"] == pytest.approx(zero2 - stock, abs=1e-6)
    assert all(r["loss_increase"] == 0 for r in rows if r["alpha_ffn"] == 1.0)
