"""Surface edits (scale/invert/zero/set/wall; rows/cols; top-N; live), explore helpers and the CLI."""

import json

import numpy as np
import pytest
import torch

from geosteer import manifold
from geosteer.interventions import steer
from geosteer.kernels.bspline import bspline_basis
from geosteer.manifold import edit as E
from geosteer.manifold.explore import layer_norms, layer_sensitivity, top_surfaces
from tests.conftest import random_bank, sample_ids


def test_parse_edit_forms():
    e = E.parse_edit("invert layer=8 head=26 dim=25 rows=5-10")
    assert (e.op, e.layers, e.heads, e.dims, e.rows) == ("invert", [8], [26], [25], list(range(5, 11)))
    e = E.parse_edit("scale=0.5:layers=1,3,7-9")
    assert e.value == 0.5 and e.layers == [1, 3, 7, 8, 9]
    e = E.parse_edit("set=1.5 layer=8 head=2 dim=4 row=5 col=5")
    assert e.value == 1.5 and e.rows == [5] and e.cols == [5]
    assert E.parse_edit("wall layer=10 top=8").top == 8
    assert E.parse_edit(e.describe()) == e
    for bad, msg in [("flip layer=1", "unknown edit"), ("scale layer=1", "needs a factor"),
                     ("invert=2", "takes no value"), ("zero layer=x", "not an index"),
                     ("zero layr=1", "unknown key"), ("zero layer", "key=value"), ("zero rows=5-2", "empty")]:
        with pytest.raises(ValueError, match=msg):
            E.parse_edit(bad)


def test_edit_ops_exact(tiny_model):
    model, _ = tiny_model("llama")
    bank = random_bank(model)
    c0 = bank.coefficients.detach().clone()
    E.apply_edit(bank, "scale=2 layer=1 head=0 dim=3")
    assert torch.equal(bank.coefficients[1, 0, 3], 2 * c0[1, 0, 3])
    assert torch.equal(bank.coefficients[1, 0, 4], c0[1, 0, 4])
    E.apply_edit(bank, "invert layer=2 head=1")
    assert torch.equal(bank.coefficients[2, 1], -c0[2, 1])
    E.apply_edit(bank, "invert layer=0 head=1 dim=2 rows=5-10")
    c = bank.coefficients[0, 1, 2]
    assert torch.equal(c[5:], -c0[0, 1, 2, 5:]) and torch.equal(c[:5], c0[0, 1, 2, :5])
    E.apply_edit(bank, "zero layer=0 head=2 dim=2 cols=0-4")
    c = bank.coefficients[0, 2, 2]
    assert torch.all(c[:, :5] == 0) and torch.equal(c[:, 5:], c0[0, 2, 2, :, 5:])
    E.apply_edit(bank, "set=1.5 layer=0 head=3 dim=1 row=5 col=6")
    assert bank.coefficients[0, 3, 1, 5, 6] == 1.5
    assert int((bank.coefficients[0, 3, 1] != c0[0, 3, 1]).sum()) == 1
    assert [h["op"] for h in bank.history] == ["scale", "invert", "invert", "zero", "set"]
    assert bank.history[2]["coefficients"] == 6 * 11


def test_wall_blocks_value_flow_inside_the_grid(tiny_model):
    """The legacy grid-wall (C = -1); exact region walls are tested in test_manifold_walls.py."""
    model, _ = tiny_model("llama")
    bank = random_bank(model)
    E.apply_edit(bank, E.grid_wall(layers=[1]))
    assert torch.all(bank.coefficients[1] == -1)
    # 1 + S = 0 for q, k inside [lo, hi]
    q, k = torch.meshgrid(torch.linspace(-4, 3.99, 9), torch.linspace(-4, 3.99, 7), indexing="ij")
    assert torch.allclose(bank.surface(1, 2, 5, q, k), torch.full_like(q, -1.0), atol=1e-6)
    # top-N wall: exactly the N largest-norm surfaces of the layer
    bank2 = random_bank(model, seed=1)
    norms = bank2.coefficients[2].flatten(-2).norm(dim=-1)
    rec = E.apply_edit(bank2, "grid-wall layer=2 top=5")
    walled = (bank2.coefficients[2] == -1).all(-1).all(-1)
    assert int(walled.sum()) == 5
    top5 = set(torch.topk(norms.flatten(), 5).indices.tolist())
    assert top5 == set(torch.nonzero(walled.flatten()).flatten().tolist())
    assert len(rec["selected"]) == 5 and all(s[0] == 2 for s in rec["selected"])


def test_wall_on_the_model_zeroes_the_attention_output(tiny_model):
    """With every key/query coordinate inside the range, a layer-wide wall makes that layer's attention
    output exactly zero (the gain 1 + S is 0 for every pair)."""
    model, tok = tiny_model("llama")
    ids = sample_ids(tok, 1)
    bank = random_bank(model, grid_range=(-1e3, 1e3))
    E.apply_edit(bank, E.wall(layers=[1]))
    from geosteer.record import Recorder

    rec = Recorder(points=("attn_out",), layers=[1])
    with torch.no_grad(), steer(model, bank, rec):
        model(ids)
    out = rec["attn_out", 1][0]
    o_proj_bias = getattr(model.model.layers[1].self_attn.o_proj, "bias", None)
    expect = torch.zeros_like(out) if o_proj_bias is None else o_proj_bias.expand_as(out)
    assert (out - expect).abs().max() < 1e-4


def test_edits_refused_out_of_range(tiny_model):
    model, _ = tiny_model("llama")
    bank = random_bank(model, layers=[0, 2])
    before = bank.coefficients.detach().clone()
    cases = [("invert layer=1", "surfaces cover layers 0, 2"),
             ("invert layer=0 head=4", r"head 4 out of range \(valid 0–3\)"),
             ("zero layer=0 dim=16", r"dim 16 out of range \(valid 0–15\)"),
             ("zero layer=0 rows=5-11", r"row 11 out of range \(valid 0–10\)"),
             ("zero layer=0 col=12", r"column 12 out of range \(valid 0–10\)"),
             ("wall layer=0 head=0 dim=0 top=2", r"top 2 exceeds the 1 selected surfaces \(valid 1–1\)")]
    for text, msg in cases:
        with pytest.raises(ValueError, match=msg):
            E.apply_edits(bank, ["scale=3 layer=0", text])  # validated first: nothing applied
    assert torch.equal(bank.coefficients, before) and bank.history == []


def test_live_edit_restores(tiny_model):
    model, tok = tiny_model("llama")
    ids = sample_ids(tok, 1)
    bank = random_bank(model)
    with torch.no_grad(), steer(model, bank):
        ref = model(ids).logits
        with E.live(bank, "invert layer=1", E.wall(layers=[2])):
            edited = model(ids).logits
            assert len(bank.history) == 2
        again = model(ids).logits
    assert (edited - ref).abs().max() > 1e-3
    assert torch.equal(again, ref)
    assert bank.history == []
    with pytest.raises(RuntimeError):
        with E.live(bank, "zero layer=0"):
            raise RuntimeError("boom")
    assert bank.coefficients.abs().sum() > 0 and bank.history == []


def test_row_edit_changes_only_queries_that_reach_those_rows(tiny_model):
    """Row a of the control net only matters for queries inside B_a's support [t_a, t_{a+4})."""
    model, _ = tiny_model("llama")
    bank = random_bank(model)
    before = bank.surface(0, 0, 0, torch.linspace(-6, 6, 50)[:, None], torch.linspace(-6, 6, 50)[None, :])
    E.apply_edit(bank, "invert layer=0 head=0 dim=0 rows=9-10")
    after = bank.surface(0, 0, 0, torch.linspace(-6, 6, 50)[:, None], torch.linspace(-6, 6, 50)[None, :])
    q = torch.linspace(-6, 6, 50)
    touched = bspline_basis(q, 8, -4.0, 4.0)[:, 9:].sum(-1) > 0
    diff = (after - before).abs().amax(1) > 0
    assert torch.equal(diff, diff & touched) and diff.any()


def _last_logprobs(model, tok, bank, prompts):
    """Next-token log-probabilities after each prompt with ``bank`` attached (plain forward passes)."""
    from geosteer.eval.generation import prompt_ids

    with steer(model, bank), torch.no_grad():
        return torch.stack([torch.log_softmax(model(input_ids=prompt_ids(tok, p), use_cache=False).logits[0, -1]
                                              .float(), -1) for p in prompts])


def test_explore_helpers(tiny_model):
    model, tok = tiny_model("llama")
    bank = random_bank(model)
    with torch.no_grad():
        bank.coefficients[1, 2, 3] *= 10
    tops = top_surfaces(bank, 3)
    assert tops[0]["layer"] == 1 and (tops[0]["head"], tops[0]["dim"]) == (2, 3)
    # against numpy: every surface's Frobenius norm, the three largest by argsort
    C = bank.coefficients.detach().double().numpy()
    norms = np.sqrt((C ** 2).sum(axis=(-1, -2)))  # (layers, heads, dims)
    want = [np.unravel_index(i, norms.shape) for i in np.argsort(-norms, axis=None, kind="stable")[:3]]
    assert [(t["layer"], t["head"], t["dim"]) for t in tops] == [(bank.layers[s], h, d) for s, h, d in want]
    for t, (s, h, d) in zip(tops, want, strict=True):
        assert t["norm"] == pytest.approx(norms[s, h, d], rel=1e-6)
        assert t["max_abs"] == pytest.approx(np.abs(C[s, h, d]).max(), rel=1e-6)
    per_layer = layer_norms(bank)
    assert [r["layer"] for r in per_layer] == list(bank.layers)
    for s, r in enumerate(per_layer):
        assert r["norm"] == pytest.approx(np.sqrt((C[s] ** 2).sum()), rel=1e-6)
        assert r["mean_surface_norm"] == pytest.approx(norms[s].mean(), rel=1e-6)
        assert r["max_surface_norm"] == pytest.approx(norms[s].max(), rel=1e-6)
    prompts = ["The cat sat on", "Paris is the capital of"]
    rows = layer_sensitivity(model, tok, bank, prompts)
    assert {r["layer"] for r in rows} == {0, 1, 2}
    by_layer = {r["layer"]: r for r in rows}
    ref = _last_logprobs(model, tok, bank, prompts)
    for s, layer in enumerate(bank.layers):  # each KL against a hand-run zeroing of that layer's coefficients
        saved = bank.coefficients.detach().clone()
        with torch.no_grad():
            bank.coefficients[s] = 0
        try:
            zeroed = _last_logprobs(model, tok, bank, prompts)
        finally:
            with torch.no_grad():
                bank.coefficients.copy_(saved)
        kl = torch.nn.functional.kl_div(zeroed, ref, log_target=True, reduction="none").sum(-1)
        assert by_layer[layer]["mean_kl"] == pytest.approx(float(kl.mean()), rel=1e-4, abs=1e-7)
        assert by_layer[layer]["max_kl"] == pytest.approx(float(kl.max()), rel=1e-4, abs=1e-7)
    assert by_layer[1]["mean_kl"] > 0  # layer 1 carries the ×10 surface
    assert torch.count_nonzero(bank.coefficients) == bank.coefficients.numel()  # restored
    assert manifold.attached_bank(model) is None
    net = E.format_control_net(E.control_net(bank, 1, 2, 3))
    assert len(net.splitlines()) == 12


def test_cli_edit_show_explore(tiny_model, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from geosteer.cli import app

    model, _ = tiny_model("llama")
    bank = random_bank(model)
    src = manifold.save(bank, tmp_path / "in")
    r = CliRunner().invoke(app, ["manifold", "edit", "--surfaces", str(src), "--out", str(tmp_path / "out"),
                                 "invert layer=1", "wall layer=2 top=3", "--json"])
    assert r.exit_code == 0, r.output
    out = manifold.load(tmp_path / "out")
    assert torch.equal(out.coefficients[1], -bank.coefficients[1])
    assert [h["op"] for h in out.history] == ["invert", "wall"]
    r = CliRunner().invoke(app, ["show", str(tmp_path / "out"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["edits"] == 2
    r = CliRunner().invoke(app, ["measure", "explore", "--surfaces", str(src), "--prompt", "The cat sat on",
                                 "--prompt", "Hello", "--net", "1,2,3", "--top", "4", "--out",
                                 str(tmp_path / "x.json")])
    assert r.exit_code == 0, r.output
    assert "control net of layer 1 head 2 dim 3" in r.output
    assert "next-token KL over 2 prompts" in " ".join(r.output.split())
    doc = json.loads((tmp_path / "x.json").read_text())
    assert len(doc["sensitivity"]) == 3 and len(doc["top_surfaces"]) == 4
    r = CliRunner().invoke(app, ["manifold", "edit", "--surfaces", str(src), "--out", str(tmp_path / "bad"),
                                 "invert layer=7"])
    assert r.exit_code != 0 and not (tmp_path / "bad").exists()


@pytest.mark.parametrize("verb", ["explore"])
def test_negative_top_is_refused_not_sliced(tiny_model, tmp_path, monkeypatch, capsys, verb):
    from tests.cli_helpers import refused_before_load

    model, _ = tiny_model("llama")
    src = manifold.save(random_bank(model), tmp_path / "in")
    model_opt = ["--model", "tiny-llama"] if verb == "explore" else []
    err = refused_before_load(monkeypatch, capsys, "measure", verb, "--surfaces", str(src), "--top", "-1", *model_opt)
    assert "'--top'" in err and "greater than or equal to 0" in err
