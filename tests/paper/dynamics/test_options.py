"""Issue 13 item 5: the split reference (unit(x) vs unit(x + A)), BOS kept/ablated, OV dominant eigenvalue by
modulus vs real part — each against an independent computation."""

import numpy as np
import pytest
import torch

from geosteer import anatomy
from geosteer.dynamics.ov import head_ov, ov_rows, ov_summary, ov_weights
from geosteer.dynamics.variants import FFNVariant
from geosteer.interventions import steer
from geosteer.record import Recorder
from geosteer_paper.dynamics.options import split_options_study
from tests.conftest import sample_ids


def _unit(x):
    return x / x.norm(dim=-1, keepdim=True)


@pytest.mark.parametrize("family", ["llama", "gemma3"])
@pytest.mark.parametrize("reference", ["read", "input"])
@pytest.mark.parametrize("skip_first", [False, True])
def test_split_reference_and_bos_against_stock_records(family, reference, skip_first, tiny_model):
    """Only layer 1 is modified, so its inputs are the stock ones: x' must be x + A + P_u Φ from stock records."""
    model, tok = tiny_model(family)
    ids = sample_ids(tok)
    layer = 1
    rec = Recorder(["resid_pre", "attn_out", "mlp_in", "mlp_out", "resid_post"], [layer])
    with torch.no_grad(), steer(model, rec):
        model(ids)
    x, a, m, phi = (rec[p, layer][0] for p in ("resid_pre", "attn_out", "mlp_in", "mlp_out"))
    u = _unit(m if reference == "read" else x)
    tang = phi - (phi * u).sum(-1, keepdim=True) * u
    if skip_first:
        tang[:, 0] = phi[:, 0]
    want = x + a + tang
    got_rec = Recorder(["resid_post"], [layer])
    with torch.no_grad(), steer(model, FFNVariant("tangential", [layer], reference=reference,
                                                   skip_first=skip_first), got_rec):
        model(ids)
    torch.testing.assert_close(got_rec["resid_post", layer][0], want, atol=1e-5, rtol=1e-5)
    if reference == "input" and not anatomy(model).parallel_residual:
        other = _unit(m)
        alt = x + a + phi - (phi * other).sum(-1, keepdim=True) * other
        assert not torch.allclose(got_rec["resid_post", layer][0][:, 1:], alt[:, 1:], atol=1e-4)


def test_unknown_reference():
    with pytest.raises(ValueError, match="unknown reference"):
        FFNVariant("tangential", reference="output")


def test_split_options_study_rows(tiny_model):
    model, tok = tiny_model("llama")
    rows = split_options_study(model, sample_ids(tok), [0, 1], variants=("tangential",))
    assert {(r["reference"], r["bos"]) for r in rows} == {("read", "ablated"), ("read", "kept stock"),
                                                          ("input", "ablated"), ("input", "kept stock")}


def test_ov_dominant_by_modulus_and_by_real_part(tiny_model):
    model, _ = tiny_model("qwen2")
    an = anatomy(model)
    rows = ov_rows(model)
    weights = ov_weights(model)
    ratios, by_modulus, by_real, any_positive = [], [], [], []  # numpy's verdicts, not the rows'
    for r in rows:
        w_v, w_o = weights[r["layer"]]
        m = head_ov(w_v, w_o, r["head"], an.n_rep).double().numpy()
        ev = np.linalg.eigvals(m)
        big = ev[np.argmax(np.abs(ev))]
        top = ev[np.argmax(ev.real)]
        by_modulus.append(bool(abs(big.imag) <= 1e-6 * abs(big) and big.real > 0))
        by_real.append(bool(abs(top.imag) <= 1e-6 * abs(top) and top.real > 0))
        any_positive.append(bool(ev.real.max() > 1e-9 * np.abs(ev).max()))
        ratios.append(np.linalg.norm(m - m.T) / np.linalg.norm(m + m.T))
        assert r["dominant_positive"] == by_modulus[-1]
        assert r["dominant_by_real_positive"] == by_real[-1]
    s = ov_summary(rows)
    assert s["heads"] == len(rows) == an.n_layers * an.n_heads
    assert s["frac_dominant_positive"] == pytest.approx(np.mean(by_modulus), abs=1e-12)
    assert s["frac_dominant_by_real_positive"] == pytest.approx(np.mean(by_real), abs=1e-12)
    assert s["frac_max_real_positive"] == pytest.approx(np.mean(any_positive), abs=1e-12)
    assert s["skew_sym_ratio_mean"] == pytest.approx(np.mean(ratios), rel=1e-6)
