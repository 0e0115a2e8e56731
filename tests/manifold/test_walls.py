"""Exact region walls (issue 16 item 3): the gain is exactly 0 inside the region, also past the grid;
outside it the output is the unwalled output; against a naive per-pair reference on every tiny family;
KV-cache decoding; artifacts; bad input."""

import json
import math

import pytest
import torch

from geosteer import manifold
from geosteer.attention import attention_weights, repeat_kv
from geosteer.errors import GeosteerError
from geosteer.interventions import steer
from geosteer.kernels.bspline import bspline_basis
from geosteer.manifold import edit as E
from geosteer.manifold.walls import Wall
from tests.conftest import random_bank, sample_ids

FAMILIES = ["llama", "qwen2", "qwen3", "mistral", "gemma3", "gpt2", "gpt_neox"]
INF = math.inf


def _bank(model, seed=0, grid_range=(-0.5, 0.5), **kw):
    """Random surfaces on a deliberately narrow grid, so that many q, k lie past it."""
    return random_bank(model, seed, grid_range=grid_range, **kw)


class _Capture:
    """Outermost attention handler on one layer: the call (q, k, v, mask) and the final output."""

    def __init__(self, layer: int) -> None:
        self.layer, self.calls = layer, []

    def attach(self, model):
        from geosteer.attention import add_attention_handler, use_geosteer_attention
        from geosteer.models.anatomy import anatomy

        use_geosteer_attention(model)

        def handler(call, proceed):
            out, w = proceed(call)
            self.calls.append((call, out.detach().clone()))
            return out, w

        return add_attention_handler(anatomy(model).blocks[self.layer].attn, handler)


def _naive(call, bank, slot, walls):
    """o_id = Σ_j a_ij v_jd (1 + S_d(q_id, k_jd)) (1 − 1_R(q_id, k_jd)), one pair at a time (float64)."""
    a = attention_weights(call).double()  # (b, H, L, T)
    rep = call.n_rep
    q = call.query.double()
    k, v = repeat_kv(call.key, rep).double(), repeat_kv(call.value, rep).double()
    lo, hi = (float(bank.lo[slot]), float(bank.hi[slot])) if slot is not None else (0.0, 1.0)
    b, H, L, d = q.shape
    out = torch.zeros(b, L, H, d, dtype=torch.float64)
    for h in range(H):
        for dd in range(d):
            if slot is None:
                gain = torch.ones(b, L, k.shape[2], dtype=torch.float64)
            else:
                c = bank.coefficients[slot, h, dd].detach().double()
                gain = 1 + bspline_basis(q[:, h, :, dd], bank.grid_size, lo, hi) @ c @ \
                    bspline_basis(k[:, h, :, dd], bank.grid_size, lo, hi).transpose(-1, -2)
            blocked = torch.zeros_like(gain, dtype=torch.bool)
            for w in walls:
                if w.layer == call.layer_idx and (h, dd) in w.resolved_pairs(H, d):
                    qin = (q[:, h, :, dd] >= w.q[0]) & (q[:, h, :, dd] <= w.q[1])
                    kin = (k[:, h, :, dd] >= w.k[0]) & (k[:, h, :, dd] <= w.k[1])
                    blocked |= qin[:, :, None] & kin[:, None, :]
            out[:, :, h, dd] = torch.einsum("bij,bj,bij->bi", a[:, h], v[:, h, :, dd], gain * ~blocked)
    return out


def _run(model, ids, bank, layer):
    cap = _Capture(layer)
    with torch.no_grad(), steer(model, cap, bank):
        logits = model(ids, use_cache=False).logits
    return cap.calls[0], logits


@pytest.mark.parametrize("family", FAMILIES)
def test_walls_exact_on_every_family(tiny_model, family):
    model, tok = tiny_model(family)
    ids = sample_ids(tok, 2)[:, :24]
    bank = _bank(model)
    H, D = bank.n_heads, bank.head_dim
    (call0, out0), _ = _run(model, ids, bank, 1)
    q = call0.query
    # regions past the grid (±0.5): q ≥ 0.6, k anything, and a box reaching into both tails
    walls = [Wall(layer=1, heads=(0,), dims=(1, 2), q=(0.6, INF)),
             Wall(layer=1, pairs=((H - 1, D - 1), (0, 2)), q=(-INF, -0.7), k=(0.55, INF)),
             Wall(layer=1, heads=(H - 1,), dims=(0,))]  # the whole plane of one (head, dim)
    bank.set_walls(walls)
    (call, out), _ = _run(model, ids, bank, 1)
    assert torch.equal(call.query, q)  # layer 1's input does not depend on layer 1's walls
    ref = _naive(call, bank, bank.slot(1), walls)
    stock_scale = out0.abs().max()
    assert (out.double() - ref).abs().max() <= 1e-5 * max(1.0, float(stock_scale))
    # gain exactly 0: rows whose q is in a whole-k-line region output exactly 0 in that dim
    rows = q[:, 0, :, 1] >= 0.6
    assert rows.any() and torch.all(out[:, :, 0, 1][rows] == 0)
    assert torch.all(out[:, :, H - 1, 0] == 0)
    # outside the walled (head, dim): bit-identical to the unwalled output
    keep = torch.ones(H, D, dtype=torch.bool)
    for h, dd in [(0, 1), (0, 2), (H - 1, D - 1), (H - 1, 0)]:
        keep[h, dd] = False
    assert torch.equal(out[:, :, keep], out0[:, :, keep])
    # walled (head, dim), queries outside every q-range: the unwalled output exactly
    free = q[:, 0, :, 1] < 0.6
    assert torch.equal(out[:, :, 0, 1][free], out0[:, :, 0, 1][free])


def test_wall_blocks_value_flow_against_stock(tiny_model):
    """Value flow through a walled (head, dim) ≤ 1e-6 of stock: the legacy grid-wall leaks there."""
    model, tok = tiny_model("llama")
    ids = sample_ids(tok, 2)
    bank = _bank(model, grid_range=(-0.5, 0.5))
    legacy = _bank(model, grid_range=(-0.5, 0.5))
    E.apply_edit(legacy, E.grid_wall(layers=[1], heads=[0]))
    E.apply_edit(bank, E.wall(layers=[1], heads=[0]))
    stock = _Capture(1)
    with torch.no_grad(), steer(model, stock):
        model(ids, use_cache=False)
    (_, out), _ = _run(model, ids, bank, 1)
    (_, out_legacy), _ = _run(model, ids, legacy, 1)
    flow_stock = stock.calls[0][1][:, :, 0].abs().max()
    assert out[:, :, 0].abs().max() <= 1e-6 * flow_stock
    assert out_legacy[:, :, 0].abs().max() > 1e-2 * flow_stock  # q, k past ±0.5: the old wall passes value


def test_walls_on_a_layer_without_surfaces_and_with_zero_surfaces(tiny_model):
    model, tok = tiny_model("qwen2")
    ids = sample_ids(tok, 1)
    bank = manifold.install(model, layers=[0])
    manifold.uninstall(model)
    walls = [Wall(layer=1, heads=(1,), dims=(3, 4), k=(-INF, 0.0)), Wall(layer=0, heads=(0,), q=(0.0, INF))]
    bank.set_walls(walls)
    for layer, slot in [(1, None), (0, 0)]:
        (call, out), _ = _run(model, ids, bank, layer)
        assert (out.double() - _naive(call, bank, slot, walls)).abs().max() < 1e-5


@pytest.mark.parametrize("family", ["llama", "gemma3", "gpt2"])
def test_kv_cache_decoding_with_walls_equals_full_forward(tiny_model, family):
    model, tok = tiny_model(family)
    ids = sample_ids(tok, 1)[:, :20]
    bank = _bank(model)
    E.apply_edits(bank, ["wall layer=1 head=0 dim=0-7 q=0.1..inf", "wall layer=0 top=5 k=-inf..-0.2"])
    with torch.no_grad(), steer(model, bank):
        full = model(ids, use_cache=False).logits
        out = model(ids[:, :12], use_cache=True)
        past, steps = out.past_key_values, [out.logits]
        for t in range(12, ids.shape[1]):
            out = model(ids[:, t:t + 1], past_key_values=past, use_cache=True)
            past = out.past_key_values
            steps.append(out.logits)
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-4)


def test_walls_live_restore_and_artifact_roundtrip(tiny_model, tmp_path):
    model, tok = tiny_model("llama")
    ids = sample_ids(tok, 1)
    bank = _bank(model)
    with torch.no_grad(), steer(model, bank):
        base = model(ids).logits
    with E.live(bank, "wall layer=1 head=0 q=0.2..inf k=-inf..inf"):
        assert len(bank.walls) == 1
        with torch.no_grad(), steer(model, bank):
            walled = model(ids).logits
    assert bank.walls == [] and bank.history == []
    assert not torch.allclose(walled, base)
    rec = E.apply_edit(bank, "wall layer=1 head=0 q=0.2..inf")
    assert rec["q"] == [0.2, None] and rec["walls"][0]["k"] == [None, None]
    manifold.save(bank, tmp_path / "w")
    doc = json.loads((tmp_path / "w" / "geosteer_config.json").read_text())
    assert doc["version"] == 2 and doc["walls"] == [{"layer": 1, "q": [0.2, None], "k": [None, None],
                                                      "heads": [0]}]
    assert "Infinity" not in (tmp_path / "w" / "geosteer_config.json").read_text()
    loaded = manifold.load(tmp_path / "w", model=model)
    assert loaded.walls == bank.walls
    with torch.no_grad(), steer(model, loaded):
        assert torch.equal(model(ids).logits, walled)
    # an artifact without walls is still written (and read) as version 1
    manifold.save(_bank(model), tmp_path / "v1")
    assert json.loads((tmp_path / "v1" / "geosteer_config.json").read_text())["version"] == 1
    assert manifold.load(tmp_path / "v1").walls == []


@pytest.mark.parametrize("text, needle", [
    ("wall layer=1 q=2..1", "empty"), ("wall layer=1 k=0..0", "empty"), ("wall layer=99", "layer 99 out of range"),
    ("wall layer=1 head=40", "head 40 out of range"), ("wall layer=1 dim=999", "dim 999 out of range"),
    ("wall layer=1 q=2", "not a range"), ("wall layer=1 q=a..3", "'a' is not a number"),
    ("wall layer=1 q=nan..3", "NaN"), ("wall layer=1 rows=1-2", "not control-point rows"),
    ("invert layer=1 q=0..1", "no q/k ranges")])
def test_bad_walls_refused_with_one_line(tiny_model, text, needle):
    model, _ = tiny_model("llama")
    bank = _bank(model)
    c0 = bank.coefficients.detach().clone()
    with pytest.raises((ValueError, GeosteerError), match=needle) as ei:
        E.apply_edits(bank, [text])
    assert "\n" not in str(ei.value)
    assert bank.walls == [] and bank.history == [] and torch.equal(bank.coefficients, c0)


def test_bad_walls_in_an_artifact_refused(tiny_model, tmp_path):
    from geosteer.errors import ArtifactError

    model, _ = tiny_model("llama")
    bank = _bank(model)
    E.apply_edit(bank, "wall layer=1 head=0")
    manifold.save(bank, tmp_path / "w")
    cfg = tmp_path / "w" / "geosteer_config.json"
    doc = json.loads(cfg.read_text())
    doc["walls"][0]["q"] = [3, 1]
    cfg.write_text(json.dumps(doc))
    with pytest.raises(ArtifactError, match="invalid wall .*empty"):
        manifold.load(tmp_path / "w")


def test_cli_edit_wall_exit_2(monkeypatch, capsys, tiny_model, tmp_path):
    from tests.cli_helpers import run_cli

    model, _ = tiny_model("llama")
    src = manifold.save(_bank(model), tmp_path / "s")
    for op in ["wall layer=1 q=3..2", "wall layer=7", "wall layer=1 head=9"]:
        code, _, err = run_cli(monkeypatch, capsys, "manifold", "edit", op, "--surfaces", str(src), "--out",
                               str(tmp_path / "o"))
        lines = [x for x in err.strip().splitlines() if x]
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error:"), (op, err)
    assert not (tmp_path / "o").exists()
    code, _, _ = run_cli(monkeypatch, capsys, "manifold", "edit", "wall layer=1 head=0 k=-inf..0",
                         "--surfaces", str(src), "--out", str(tmp_path / "o"))
    assert code == 0 and manifold.load(tmp_path / "o").walls[0].k == (-INF, 0.0)
    code, out, _ = run_cli(monkeypatch, capsys, "show", str(tmp_path / "o"), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["walls"] == 1 and doc["wall_regions"] == [
        {"layer": 1, "q": [None, None], "k": [None, 0.0], "heads": [0]}]
