"""MLP-internal sites (paper App. D, Eqs. 13-14) against a naive per-group loop with plain hooks."""

import pytest
import torch

from geosteer.errors import GeosteerError
from geosteer.interventions import steer
from geosteer.models.anatomy import anatomy
from geosteer_paper.directional.mlp_internal import MLPInternalScale, down_projection, group_contributions
from tests.conftest import random_ids


def _weight(down):
    """(d_out, I) matrix of the down projection (Linear or GPT-2 Conv1D)."""
    return down.weight if isinstance(down, torch.nn.Linear) else down.weight.T


def _proj(u, r, sp, sq):
    par = (u @ r) / (r @ r) * r
    return sp * par + sq * (u - par)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gpt2", "tiny-gpt_neox", "tiny-gemma3"])
@pytest.mark.parametrize("site", ["carrier", "contrib"])
def test_internal_sites_match_naive(tiny_model, name, site):
    m, _ = tiny_model(name)
    ids = random_ids(2, 10, seed=7)
    blk = anatomy(m).blocks[1]
    down = down_projection(blk.mlp)
    got = {}
    hx = blk.mlp.register_forward_pre_hook(lambda mod, a, kw: got.__setitem__("x", a[0] if a else
                                                                              next(iter(kw.values()))),
                                           with_kwargs=True)
    hh = down.register_forward_pre_hook(lambda mod, a: got.__setitem__("h", a[0]))
    try:
        with torch.no_grad():
            m(input_ids=ids)
    finally:
        hx.remove()
        hh.remove()
    x, h = got["x"].double(), got["h"].double()
    W = _weight(down).double()
    b = down.bias.double() if down.bias is not None else torch.zeros(W.shape[0], dtype=torch.float64)
    d = x.shape[-1]
    G = h.shape[-1] // d
    sp, sq = 0.0, 1.5
    ref = torch.zeros(*h.shape[:-1], W.shape[0], dtype=torch.float64)
    for i in range(h.shape[0]):
        for t in range(h.shape[1]):
            y = b.clone()
            for g in range(G):
                hg, Wg = h[i, t, g * d:(g + 1) * d], W[:, g * d:(g + 1) * d]
                y += Wg @ _proj(hg, x[i, t], sp, sq) if site == "carrier" else _proj(Wg @ hg, hg, sp, sq)
            y += W[:, G * d:] @ h[i, t, G * d:]
            ref[i, t] = y
    out = {}
    h2 = blk.mlp.register_forward_hook(lambda mod, a, o: out.__setitem__("y", o))  # runs after the edit
    try:
        with torch.no_grad(), steer(m, MLPInternalScale(site, sp, sq, layers=[1])):
            m(input_ids=ids)
    finally:
        h2.remove()
    assert (out["y"].double() - ref).abs().max() < 1e-4 * ref.abs().max()


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gpt2"])
def test_group_contributions_sum_to_output_and_neutral(tiny_model, name):
    m, _ = tiny_model(name)
    ids = random_ids(2, 10, seed=7)
    down = down_projection(anatomy(m).blocks[0].mlp)
    h = torch.randn(2, 5, _weight(down).shape[1], generator=torch.Generator().manual_seed(0))
    yg, rest, bias = group_contributions(down, h, anatomy(m).d_model)
    assert torch.allclose(yg.sum(-2) + rest + bias, down(h), atol=1e-5)
    with torch.no_grad():
        base = m(input_ids=ids).logits
        for site in ("carrier", "contrib"):
            with steer(m, MLPInternalScale(site, 1.0, 1.0)):
                assert torch.equal(m(input_ids=ids).logits, base)
            with steer(m, MLPInternalScale(site, 0.0, 1.0)):
                assert (m(input_ids=ids).logits - base).abs().max() > 1e-4


def test_errors_and_coverage(tiny_model):
    with pytest.raises(GeosteerError, match="unknown MLP-internal site"):
        MLPInternalScale("gate")
    m, _ = tiny_model("tiny-llama")
    assert MLPInternalScale.coverage(m) == 1.0


def test_cli_mlp_internal(tmp_path):
    from typer.testing import CliRunner

    from geosteer.cli import app

    out = tmp_path / "mi.json"
    res = CliRunner().invoke(app, ["study", "directional", "mlp-internal", "-m", "tiny-llama", "--texts", "2",
                                   "--text-len", "12", "--out", str(out)])
    assert res.exit_code == 0, res.output
    import json

    rows = json.loads(out.read_text())["rows"]
    assert {(r["geometry"], r["setting"]) for r in rows} == {
        (g, s) for g in ("mlp_out", "carrier", "contrib") for s in ("no_para", "no_perp")}
