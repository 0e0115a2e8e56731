"""Directional decomposition math (paper Eqs. 1-2, 6, 11) against independent numpy computations."""

import math

import numpy as np
import pytest
import torch

from geosteer.directional.config import SITES, ComponentScaleConfig, parse_layers
from geosteer.directional.decompose import RunningStats, component_scale, decompose, pair_stats
from geosteer.errors import GeosteerError


def _np_stats(d, z):
    d, z = d.astype(np.float64), z.astype(np.float64)
    alpha = d @ z / (z @ z)
    par = alpha * z
    perp = d - par
    return {
        "alpha": alpha,
        "par_norm": np.linalg.norm(par),
        "perp_norm": np.linalg.norm(perp),
        "ratio": abs(alpha) * np.linalg.norm(z) / np.linalg.norm(perp),
        "abs_cos": abs(d @ z) / (np.linalg.norm(d) * np.linalg.norm(z)),
        "rel_norm": np.linalg.norm(d) / np.linalg.norm(z),
    }


def test_pair_stats_match_numpy_per_token():
    g = torch.Generator().manual_seed(0)
    d = torch.randn(3, 5, 16, generator=g)
    z = torch.randn(3, 5, 16, generator=g)
    st = pair_stats(d, z)
    for i in range(3):
        for t in range(5):
            ref = _np_stats(d[i, t].numpy(), z[i, t].numpy())
            for k, v in ref.items():
                assert st[k][i, t].item() == pytest.approx(v, rel=1e-5, abs=1e-6), k


def test_decomposition_is_orthogonal_and_complete():
    g = torch.Generator().manual_seed(1)
    d = torch.randn(50, 32, generator=g, dtype=torch.float64)
    z = torch.randn(50, 32, generator=g, dtype=torch.float64)
    alpha, par, perp = decompose(d, z)
    assert torch.allclose(par + perp, d)
    assert (perp * z).sum(-1).abs().max() < 1e-12
    # parallel part is a multiple of z: cross-check alpha with least squares
    for i in range(5):
        a_ls = np.linalg.lstsq(z[i].numpy()[:, None], d[i].numpy(), rcond=None)[0][0]
        assert alpha[i, 0].item() == pytest.approx(a_ls, rel=1e-10)


def test_component_scale_formula_and_neutrality():
    g = torch.Generator().manual_seed(2)
    y, r = torch.randn(4, 8, generator=g), torch.randn(4, 8, generator=g)
    assert torch.equal(component_scale(y, r, 1.0, 1.0), y)
    out = component_scale(y, r, 0.3, -1.5)
    for i in range(4):
        yy, rr = y[i].double().numpy(), r[i].double().numpy()
        par = (yy @ rr) / (rr @ rr) * rr
        ref = 0.3 * par + -1.5 * (yy - par)
        assert np.allclose(out[i].numpy(), ref, atol=1e-5)


def test_zero_reference_counts_as_perpendicular():
    d = torch.tensor([[1.0, 2.0]])
    alpha, par, perp = decompose(d, torch.zeros(1, 2))
    assert alpha.item() == 0.0 and torch.equal(perp, d)


def test_running_stats_masked_match_numpy():
    g = torch.Generator().manual_seed(3)
    v = torch.randn(2, 7, 3, generator=g)
    mask = torch.tensor([[True] * 7, [False, False, True, True, True, True, True]])
    rs = RunningStats()
    rs.update(v[:, :4], mask[:, :4])
    rs.update(v[:, 4:], mask[:, 4:])
    s = rs.summary()
    sel = v.numpy()[mask.numpy()]  # (12, 3)
    assert s["n"] == 12
    assert np.allclose(s["mean"].numpy(), sel.mean(0), atol=1e-6)
    assert np.allclose(s["std"].numpy(), sel.std(0), atol=1e-6)
    assert np.allclose(s["min"].numpy(), sel.min(0)) and np.allclose(s["max"].numpy(), sel.max(0))


def test_running_stats_empty_is_nan():
    s = RunningStats().summary()
    assert s["n"] == 0 and math.isnan(float(s["mean"]))


def test_config_errors():
    with pytest.raises(GeosteerError, match="valid: " + ", ".join(SITES)):
        ComponentScaleConfig("resid_foo")
    with pytest.raises(GeosteerError, match="s_par must be finite"):
        ComponentScaleConfig("attn_out", s_par=float("nan"))
    with pytest.raises(GeosteerError, match="s_perp must be finite"):
        ComponentScaleConfig("attn_out", s_perp=float("inf"))
    with pytest.raises(GeosteerError, match="must be a number"):
        ComponentScaleConfig("attn_out", s_par="big")


def test_parse_layers():
    assert parse_layers("all", 4) is None
    assert parse_layers("0-2,3", 4) == [0, 1, 2, 3]
    assert parse_layers([2, 1], 4) == [1, 2]
    with pytest.raises(GeosteerError, match="layer 2 given twice"):
        parse_layers([2, 1, 2], 4)  # a repeated layer would attach the edit twice (issue 12)
    with pytest.raises(GeosteerError, match="out of range: this model has layers 0..3"):
        parse_layers("2-4", 4)
    with pytest.raises(GeosteerError, match="bad layer spec"):
        parse_layers("a-b", 4)


def test_undefined_ratio_is_skipped_and_counted():
    z = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    d = torch.tensor([[2.0, 0.0], [1.0, 1.0]])  # first: purely parallel, r undefined; second: r = 1
    st = pair_stats(d, z)
    assert torch.isnan(st["ratio"][0]) and st["ratio"][1].item() == pytest.approx(1.0)
    rs = RunningStats()
    rs.update(torch.stack([st["ratio"], st["alpha"]], -1)[None], torch.ones(1, 2, dtype=torch.bool))
    s = rs.summary()
    assert s["count"].tolist() == [1, 2] and s["mean"][0].item() == pytest.approx(1.0)
    assert s["mean"][1].item() == pytest.approx(1.5)
