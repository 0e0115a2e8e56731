"""Attention-diagonal forms (paper Eq. 12, Table 5) against the edited outputs, on every tiny family."""

import pytest
import torch

from geosteer.attention import stock_attention
from geosteer.directional.sites import ComponentScale
from geosteer.interventions import steer
from geosteer.models.anatomy import anatomy
from geosteer_paper.directional.diagonal import (
    DiagonalCapture,
    diagonal_edited_output,
    layer_views,
    linear_attention_branch,
    value_diagonal_change,
)
from geosteer_paper.reproduction.references import capture_call
from tests.directional.helpers import padded_inputs

FAMILIES = ["tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-mistral", "tiny-gemma3", "tiny-gpt2",
            "tiny-gpt_neox"]


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("space", ["head", "concat"])
def test_value_diagonal_form_is_exact(tiny_model, name, space):
    """Ã = A + diag(ΔA) applied to the values gives the edited output of the value handler (≤ 1e-5)."""
    m, _ = tiny_model(name)
    ids, mask = padded_inputs(2, 16, seed=0, pad=3)
    call = capture_call(m, 1, ids, mask)
    valid = mask.bool()
    for site in ("value_full", "value_exclude_self"):
        for s_par in (0.0, 0.4, 2.5):
            delta, w = value_diagonal_change(call, site, s_par, space)
            ref = diagonal_edited_output(call, delta, w)  # (b, q, H, dv)
            out, _ = ComponentScale(site, s_par, 1.0, value_space=space)._value_handler()(call, stock_attention)
            err = (out.double() - ref)[valid].abs().max().item()
            assert err <= 1e-5, (site, s_par, err)
            if s_par != 1.0:
                stock, _ = stock_attention(call)
                assert (out - stock)[valid].abs().max() > 1e-4  # the edit did something
    # s⊥ ≠ 1 is not a diagonal change: the form no longer matches
    delta, w = value_diagonal_change(call, "value_exclude_self", 0.0, space)
    out, _ = ComponentScale("value_exclude_self", 0.0, 0.5, value_space=space)._value_handler()(
        call, stock_attention)
    assert (out.double() - diagonal_edited_output(call, delta, w))[valid].abs().max() > 1e-4


@pytest.mark.parametrize("name", [f for f in FAMILIES if f != "tiny-gemma3"])
def test_residual_diagonal_form_matches_scalar_constraint(tiny_model, name):
    """Residual form (Table 5): (A + ΔA·W_O v_t)ᵀz equals the attn_out-edited update's ᵀz; the full vector
    does not match (the diagonal change has a perpendicular part the edit has not)."""
    m, _ = tiny_model(name)
    ids, mask = padded_inputs(2, 16, seed=0, pad=3)
    layer, s_par = 1, 0.0
    base = DiagonalCapture([layer])
    with steer(m, base):
        m(input_ids=ids, attention_mask=mask)
    views = layer_views(m, base, layer, s_par)
    edited = DiagonalCapture([layer])
    with steer(m, ComponentScale("attn_out", s_par, 1.0, layers=[layer]), edited):
        m(input_ids=ids, attention_mask=mask)
    z = base.z[layer].double()
    assert torch.equal(edited.z[layer], base.z[layer])
    y, y_edit = base.update[layer].double(), edited.update[layer].double()
    assert (y_edit - y).abs().max() > 1e-4
    realised = views["residual"] * views["residual_denominator"]  # ΔA·(W_O v_t)ᵀz
    want = ((y_edit - y) * z).sum(-1)
    valid = mask.bool()
    scale = (y.norm(dim=-1) * z.norm(dim=-1))[valid]
    assert ((realised - want)[valid].abs() / scale).max() < 1e-5
    # the independent expectation: (ỹ − y)ᵀz = (s∥ − 1)·yᵀz
    assert torch.allclose(want[valid], (s_par - 1.0) * (y * z).sum(-1)[valid], atol=1e-4 * scale.max().item())
    # not a full-vector realisation: ΔA·W_O v_t differs from ỹ − y
    from geosteer_paper.directional.diagonal import apply_linear, concat_own_values, output_projection

    wo_vt = apply_linear(output_projection(anatomy(m).blocks[layer].attn), concat_own_values(base.calls[layer]))
    diff = views["residual"][..., None] * wo_vt.double() - (y_edit - y)
    assert (diff.norm(dim=-1)[valid] / (y_edit - y).norm(dim=-1)[valid]).max() > 1e-2


def test_residual_form_undefined_for_sandwich_norms(tiny_model):
    m, _ = tiny_model("tiny-gemma3")
    assert not linear_attention_branch(m)
    ids, mask = padded_inputs(2, 16, seed=0, pad=3)
    cap = DiagonalCapture([0])
    with steer(m, cap):
        m(input_ids=ids, attention_mask=mask)
    v = layer_views(m, cap, 0, 0.0)
    assert v["residual"] is None and v["value_exclude_self"].shape == v["weights"].shape[:3]


def test_removed_case_closed_form(tiny_model):
    """Table 5 removed cases: Ã_tt = −Σ_{s<t} A_ts v_sᵀv_t/‖v_t‖² (full aggregate) and
    Ã_tt = A_tt − Σ_{s<t} A_ts v_sᵀv_t/‖v_t‖² (exclude-self), by a naive loop."""
    m, _ = tiny_model("tiny-llama")
    ids = torch.randint(5, 900, (1, 9), generator=torch.Generator().manual_seed(1))
    call = capture_call(m, 0, ids, torch.ones_like(ids))
    full, w = value_diagonal_change(call, "value_full", 0.0)
    excl, _ = value_diagonal_change(call, "value_exclude_self", 0.0)
    from geosteer.attention import repeat_kv

    v = repeat_kv(call.value, call.n_rep).double()
    for h in range(w.shape[1]):
        for t in range(w.shape[2]):
            vt = v[0, h, t]
            cross = sum(w[0, h, t, s] * (v[0, h, s] @ vt) / (vt @ vt) for s in range(t)) if t else 0.0
            assert abs(float(w[0, h, t, t] + full[0, h, t] - (-cross))) < 1e-9
            assert abs(float(w[0, h, t, t] + excl[0, h, t] - (w[0, h, t, t] - cross))) < 1e-9
