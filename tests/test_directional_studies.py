"""Compression helpers, error decomposition, pretraining loop and the CLI (tiny models only)."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from geosteer import load_model
from geosteer.directional.compression import (
    calibrate,
    compress,
    prune_wanda,
    quantize_awq,
    quantize_rtn,
    update_errors,
)
from geosteer.directional.studies import sweep_settings
from geosteer.errors import GeosteerError


def test_rtn_grid_and_error_bound():
    w = torch.randn(6, 32, generator=torch.Generator().manual_seed(0))
    q = quantize_rtn(w, bits=4, group=8)
    for r in range(6):
        for g in range(4):
            blk, qb = w[r, g * 8:(g + 1) * 8], q[r, g * 8:(g + 1) * 8]
            step = (blk.max() - blk.min()).item() / 15
            assert len(set(np.round(qb.numpy(), 5))) <= 16
            assert (qb - blk).abs().max().item() <= step / 2 + 1e-6


def test_awq_never_worse_than_rtn_on_calibration_rows():
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


@pytest.mark.parametrize("method,kind,args", [("rtn3", "rtn", (3,)), ("awq8", "awq", (8,)),
                                              ("wanda30", "wanda", (0.3,)), ("wanda1:4", "wanda_nm", (1, 4))])
def test_parametric_methods_apply_the_named_strength(method, kind, args):
    from geosteer.directional.compression import block_linears, parse_method

    assert parse_method(method) == (kind, args)
    m, _ = load_model("tiny-llama")
    ids = [torch.randint(5, 900, (1, 12), generator=torch.Generator().manual_seed(3))]
    calib = calibrate(m, ids)
    comp, info = compress(m, method, calib)
    name, lin = next(iter(block_linears(m).items()))
    got = block_linears(comp)[name].weight
    if kind == "rtn":
        assert torch.equal(got, quantize_rtn(lin.weight.float(), 3, 64))
        assert len(torch.unique(got[0, :64])) <= 2 ** 3
    elif kind == "wanda":
        assert info["zero_fraction"] == pytest.approx(0.3, abs=0.01)
    elif kind == "wanda_nm":
        assert info["zero_fraction"] == pytest.approx(0.75, abs=1e-6)
    else:  # 8-bit AWQ changes weights only slightly
        assert 0 < (got - lin.weight).abs().max() < 0.05 * lin.weight.abs().max()


@pytest.mark.parametrize("bad", ["rtn9", "awq1", "wanda0", "wanda100", "wanda4:2", "gptq4"])
def test_unknown_methods_name_the_valid_forms(bad):
    from geosteer.directional.compression import parse_method

    with pytest.raises(GeosteerError, match=f"unknown compression method '{bad}'; valid forms: rtn<bits>"):
        parse_method(bad)


def test_sweep_grid_is_the_papers():
    s = sweep_settings(["resid_attn"])
    par = sorted(c.s_par for c in s if c.site == "resid_attn" and c.s_perp == 1.0)
    perp = sorted(c.s_perp for c in s if c.site == "resid_attn" and c.s_par == 1.0 and c.s_perp != 1.0)
    assert par == [x / 4 for x in range(-8, 13) if x != 4]
    assert perp == [x / 4 for x in range(0, 9) if x != 4]
    assert {c.site for c in s} == {"resid_attn", "value_full", "diag_removal"}


def test_pretrain_variants_train_and_differ():
    from geosteer.directional.pretrain import _batch, train_one

    data = torch.randint(0, 256, (4000,), generator=torch.Generator().manual_seed(0))
    vals = [_batch(data, torch.Generator().manual_seed(1), 2, 16)]
    kw = dict(d_model=32, layers=1, heads=2, ffn=64)
    res = {v: train_one(v, 0, data, vals, steps=3, batch=2, ctx=16, lr=1e-2, eval_every=3, model_kw=kw,
                        log=lambda s: None) for v in ("baseline", "value_par")}
    assert res["baseline"]["curve"][0]["step"] == 3
    assert res["baseline"]["final_val"] != res["value_par"]["final_val"]


def test_pretrain_val_loss_is_next_byte_cross_entropy():
    """The validation loss scores token t+1 from tokens ≤ t (a naive per-position log-softmax), and a
    periodic byte stream is learned: train and val loss both fall."""
    from geosteer.directional.pretrain import _batch, _loss, small_model, train_one

    model = small_model(d_model=32, layers=1, heads=2, ffn=64, ctx=16, seed=0).eval()
    x = torch.randint(0, 256, (2, 17), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        logits = model(input_ids=x[:, :-1]).logits
    naive = sum(-torch.log_softmax(logits[b, t], -1)[x[b, t + 1]].item()
                for b in range(2) for t in range(16)) / 32
    assert _loss(model, [x]) == pytest.approx(naive, rel=1e-5)
    data = torch.arange(4000) % 7 + 97
    vals = [_batch(data, torch.Generator().manual_seed(1), 4, 16)]
    res = train_one("baseline", 0, data, vals, steps=40, batch=4, ctx=16, lr=1e-2, eval_every=20,
                    model_kw=dict(d_model=32, layers=1, heads=2, ffn=64), log=lambda s: None)
    first, last = res["curve"]
    assert last["val_loss"] < first["val_loss"] < math.log(256) and last["val_loss"] < 0.5


def test_decompose_cli_json_and_csv(tmp_path):
    from geosteer.cli import app

    csv = tmp_path / "d.csv"
    r = CliRunner().invoke(app, ["decompose", "-m", "tiny-llama", "--text-file", __file__, "--tokens", "24",
                                 "--layers", "0-1", "--json", "--csv", str(csv)])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    sites = {(row["layer"], row["site"]) for row in data["rows"]}
    assert sites >= {(0, "attn"), (0, "mlp"), (0, "block"), (1, "value")}
    assert csv.read_text().splitlines()[0].startswith("layer,space,site")


@pytest.mark.parametrize("args,msg", [
    (["directional", "sweep", "--sites", "resid_foo"], "unknown site 'resid_foo'; valid: resid_attn"),
    (["directional", "ppl", "--site", "resid_attn", "--s-par", "nan"], "s_par must be finite"),
])
def test_cli_bad_input_one_line_error(args, msg):
    p = subprocess.run([sys.executable, "-m", "geosteer.cli", *args], capture_output=True, text=True)
    assert p.returncode == 2 and msg in p.stderr and "Traceback" not in p.stderr
