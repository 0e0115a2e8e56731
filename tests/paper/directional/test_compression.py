"""Compression helpers (``geosteer_paper.directional.compression``): RTN / AWQ / Wanda against naive references,
the update-error decomposition, the method names (tiny models only)."""

import numpy as np
import pytest
import torch

from geosteer import load_model
from geosteer.errors import GeosteerError
from geosteer_paper.directional.compression import (
    calibrate,
    compress,
    prune_wanda,
    quantize_awq,
    quantize_rtn,
    update_errors,
)


def test_rtn_grid_and_error_bound():
    w = torch.randn(6, 32, generator=torch.Generator().manual_seed(0))
    q = quantize_rtn(w, bits=4, group=8)
    for r in range(6):
        for g in range(4):
            blk, qb = w[r, g * 8:(g + 1) * 8], q[r, g * 8:(g + 1) * 8]
            step = (blk.max() - blk.min()).item() / 15
            assert len(set(np.round(qb.numpy(), 5))) <= 16
            assert (qb - blk).abs().max().item() <= step / 2 + 1e-6


def test_awqlite_never_worse_than_rtn_on_calibration_rows():
    g = torch.Generator().manual_seed(1)
    w = torch.randn(8, 32, generator=g)
    x = torch.randn(64, 32, generator=g) * torch.linspace(0.1, 5, 32)  # salient channels
    wq, a = quantize_awq(w, x.abs().mean(0), x, bits=4, group=8)
    err_awq = ((x @ wq.T - x @ w.T) ** 2).mean()
    err_rtn = ((x @ quantize_rtn(w, 4, 8).T - x @ w.T) ** 2).mean()
    assert err_awq <= err_rtn + 1e-7 and 0.0 <= a <= 1.0


def test_wanda_masks_match_naive_selection():
    g = torch.Generator().manual_seed(2)
    w = torch.randn(4, 16, generator=g)
    sq = torch.rand(16, generator=g) + 0.1
    score = (w.abs() * sq.sqrt()).numpy()
    un = prune_wanda(w, sq, 0.5)
    for r in range(4):
        keep = set(np.argsort(-score[r])[:8])
        assert {j for j in range(16) if un[r, j] != 0} == keep
    nm = prune_wanda(w, sq, nm=(2, 4))
    for r in range(4):
        for blk in range(4):
            s = score[r, blk * 4:(blk + 1) * 4]
            keep = {blk * 4 + j for j in np.argsort(-s)[:2]}
            assert {j for j in range(blk * 4, blk * 4 + 4) if nm[r, j] != 0} == keep


def test_update_errors_zero_for_identical_and_decomposed_for_pruned():
    m, _ = load_model("tiny-llama")
    ids = [torch.randint(5, 900, (1, 12), generator=torch.Generator().manual_seed(3))]
    calib = calibrate(m, ids)
    same, _ = compress(m, "wanda50", {k: {**v, "sq": v["sq"] * 0 + 1} for k, v in calib.items()})
    rows0 = update_errors(m, m, ids)
    assert all(r["total_err_mean"] == 0 for r in rows0)
    rows = update_errors(m, same, ids)
    for r in rows:  # ‖e‖² = ‖e∥‖² + ‖e⊥‖² per token, so mean total ≥ each part's mean
        assert r["total_err_mean"] >= max(r["perp_err_mean"], r["par_err_mean"]) - 1e-9
        assert r["total_err_mean"] > 0


@pytest.mark.parametrize("method,kind,args", [("rtn3", "rtn", (3,)), ("awqlite8", "awqlite", (8,)),
                                              ("awq8", "awq", (8, 1.0)), ("gptq8", "gptq", (8,)),
                                              ("wanda30", "wanda", (0.3,)), ("wanda1:4", "wanda_nm", (1, 4))])
def test_parametric_methods_apply_the_named_strength(method, kind, args, tiny_model):
    from geosteer_paper.directional.compression import block_linears, parse_method

    assert parse_method(method) == (kind, args)
    m, _ = tiny_model("llama")
    ids = [torch.randint(5, 900, (1, 12), generator=torch.Generator().manual_seed(3))]
    calib = calibrate(m, ids)
    comp, info = compress(m, method, calib, batches=ids)
    name, lin = next(iter(block_linears(m).items()))
    got = block_linears(comp)[name].weight
    if kind == "rtn":
        assert torch.equal(got, quantize_rtn(lin.weight.float(), 3, 64))
        assert len(torch.unique(got[0, :64])) <= 2 ** 3
    elif kind == "wanda":
        assert info["zero_fraction"] == pytest.approx(0.3, abs=0.01)
    elif kind == "wanda_nm":
        assert info["zero_fraction"] == pytest.approx(0.75, abs=1e-6)
    else:  # 8-bit AWQ / GPTQ change weights only slightly
        assert 0 < (got - lin.weight).abs().max() < 0.05 * lin.weight.abs().max()


@pytest.mark.parametrize("bad", ["rtn9", "awq1", "awq4-perp0.5", "gptq9", "awqlite1", "wanda0", "wanda100",
                                 "wanda4:2", "awq4perp2"])
def test_unknown_methods_name_the_valid_forms(bad):
    from geosteer_paper.directional.compression import parse_method

    assert parse_method("awq4-perp2.5") == ("awq", (4, 2.5))
    with pytest.raises(GeosteerError, match=f"unknown compression method '{bad}'; valid forms: rtn<bits>"):
        parse_method(bad)
