"""The value space of the value sites (per head or concatenated) as a recipe key, in the sweep and in the
measurement: neutral = stock in both spaces on every tiny family; concatenated statistics against a naive
loop over heads and tokens on the materialised attention weights."""

import json

import numpy as np
import pytest
import torch

from geosteer.attention import add_attention_handler, attention_weights, repeat_kv
from geosteer.directional.measure import DirectionalMeasure
from geosteer.directional.sites import ComponentScale
from geosteer.errors import GeosteerError
from geosteer.interventions import steer
from geosteer.models.anatomy import anatomy
from geosteer.recipe import InterventionSpec, parse_settings

FAMILIES = ["llama", "qwen2", "qwen3", "mistral", "gemma3", "gpt2", "gpt_neox"]


def _ids():
    ids = torch.randint(5, 900, (2, 12), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    return ids, mask


def _spec(*settings: str) -> InterventionSpec:
    return parse_settings(list(settings), InterventionSpec())


@pytest.mark.parametrize("family", FAMILIES)
def test_recipe_neutral_is_stock_in_both_spaces(tiny_model, family):
    m, _ = tiny_model(family)
    ids, mask = _ids()
    base = m(input_ids=ids, attention_mask=mask).logits
    for site in ("value_exclude_self", "value_full"):
        for space in ("head", "concat"):
            spec = _spec(f"scale_site={site}", "scale_par=1", "scale_perp=1", f"scale_value_space={space}")
            with steer(m, *spec.build(m)):
                assert torch.equal(m(input_ids=ids, attention_mask=mask).logits, base), (site, space)


def test_recipe_key_reaches_the_edit(tiny_model):
    """``scale_value_space=concat`` gives the logits of ``ComponentScale(..., value_space="concat")``, which
    differ from the per-head edit; residual sites ignore the key."""
    m, _ = tiny_model("llama")
    ids, mask = _ids()

    def logits(*ivs):
        with steer(m, *ivs):
            return m(input_ids=ids, attention_mask=mask).logits

    spec = _spec("scale_site=value_exclude_self", "scale_par=0", "scale_value_space=concat")
    assert spec.changed()["scale_value_space"] == "concat"
    cat = logits(*spec.build(m))
    assert torch.equal(cat, logits(ComponentScale("value_exclude_self", 0.0, value_space="concat")))
    head = logits(*_spec("scale_site=value_exclude_self", "scale_par=0").build(m))
    assert (cat - head).abs().max() > 1e-4
    resid = _spec("scale_site=attn_out", "scale_par=0", "scale_value_space=concat").build(m)
    assert torch.equal(logits(*resid), logits(ComponentScale("attn_out", 0.0)))


def test_bad_value_space_is_refused_without_a_model():
    with pytest.raises(GeosteerError, match="unknown value space .flat.; valid: head, concat"):
        _spec("scale_site=value_full", "scale_value_space=flat")


def test_sweep_settings_per_space():
    from geosteer_paper.directional.sweep import sweep_settings

    s = sweep_settings(["value_exclude_self", "attn_out"], [0.0, 0.5], [], ["head", "concat"])
    got = {(c.site, c.s_par, c.value_space) for c in s}
    assert got == {("value_exclude_self", p, v) for p in (0.0, 0.5) for v in ("head", "concat")} | {
        ("attn_out", 0.0, "head"), ("attn_out", 0.5, "head"), ("value_full", 0.0, "head"),
        ("value_full", 0.0, "concat"), ("diag_removal", 1.0, "head")}
    assert len(s) == len(got)


def test_run_sweep_keeps_spaces_apart_and_resumes_old_rows(tiny_model, tmp_path):
    """One baseline for both spaces; each row's ΔPPL is recomputed here; a row written before rows carried a
    space counts as per head on resume (only the concatenated setting runs)."""
    from geosteer.directional.config import ComponentScaleConfig
    from geosteer.eval.perplexity import heldout_ids, strided_perplexity
    from geosteer_paper.directional.sweep import run_sweep

    model, tok = tiny_model("qwen2")
    ids = heldout_ids(tok, 40)
    out = tmp_path / "s.json"
    kw = dict(context=20, stride=20, batch_size=2, log=lambda s: None)
    head, cat = (ComponentScaleConfig("value_exclude_self", 0.0, 1.0, value_space=v) for v in ("head", "concat"))
    rows = run_sweep(model, tok, ids, [head], out, **kw)
    doc = json.loads(out.read_text())
    del doc["rows"][1]["value_space"]  # as an older sweep wrote it
    out.write_text(json.dumps(doc))
    rows = run_sweep(model, tok, ids, [head, cat], out, **kw)
    assert [(r["site"], r.get("value_space")) for r in rows] == [
        ("none", None), ("value_exclude_self", None), ("value_exclude_self", "concat")]
    base = strided_perplexity(model, tok, ids=ids, context=20, stride=20).ppl
    with steer(model, ComponentScale.from_config(cat)):
        ppl = strided_perplexity(model, tok, ids=ids, context=20, stride=20).ppl
    assert rows[2]["delta_ppl"] == pytest.approx(ppl - base, rel=1e-6, abs=1e-6)
    assert abs(rows[2]["ppl"] - rows[1]["ppl"]) > 1e-6  # a different edit, not the per-head row again


@pytest.mark.parametrize("family,padded", [("llama", True), ("gemma3", False), ("qwen3", True)])
def test_concat_measurement_matches_a_naive_loop(tiny_model, family, padded):
    m, _ = tiny_model(family)
    an = anatomy(m)
    ids, mask = _ids()
    if not padded:
        mask = torch.ones_like(mask)
    calls = []
    rm = add_attention_handler(an.blocks[1].attn, lambda c, p: (calls.append(c), p(c))[1])
    meas = DirectionalMeasure(layers=[1], residual=False, value_space="concat")
    try:
        with steer(m, meas):
            got = m(input_ids=ids, attention_mask=mask).logits
    finally:
        rm()
    assert torch.equal(got, m(input_ids=ids, attention_mask=mask).logits)  # read-only
    call = calls[0]
    w = attention_weights(call).double()
    v = repeat_kv(call.value, call.n_rep).double()  # (b, H, k, d)
    ref = {k: [] for k in ("o_alpha", "c_alpha", "c_abs_cos", "a_self", "d_norm")}
    for b in range(ids.shape[0]):
        for t in range(ids.shape[1]):
            if not mask[b, t]:
                continue
            o = torch.cat([w[b, h, t] @ v[b, h] for h in range(an.n_heads)])
            vt = torch.cat([v[b, h, t] for h in range(an.n_heads)])
            d = torch.cat([w[b, h, t, t] * v[b, h, t] for h in range(an.n_heads)])
            c = o - d
            ref["o_alpha"].append((o @ vt / (vt @ vt)).item())
            ref["c_alpha"].append((c @ vt / (vt @ vt)).item())
            if c.norm() > 1e-6 * o.norm():
                ref["c_abs_cos"].append((abs(c @ vt) / (c.norm() * vt.norm())).item())
            ref["a_self"].append((d @ vt / (vt @ vt)).item())
            ref["d_norm"].append(d.norm().item())
    (row,) = meas.rows()
    assert row["value_space"] == "concat" and row["head"] is None and row["n_tokens"] == int(mask.sum())
    for stat, vals in ref.items():
        assert row[f"{stat}_mean"] == pytest.approx(np.mean(vals), rel=1e-4, abs=1e-6), stat
        assert row[f"{stat}_max"] == pytest.approx(np.max(vals), rel=1e-4, abs=1e-6), stat


@pytest.mark.parametrize("args,msg", [
    (["study", "directional", "sweep", "-m", "tiny-llama", "--value-space", "flat"],
     "unknown value space 'flat'; valid: head, concat"),
    (["study", "directional", "sweep", "-m", "tiny-llama", "--value-space", "head,head"], "--value-space"),
    (["study", "directional", "sweep", "-m", "tiny-llama", "--s-par-grid", "3:1:0.5"], "bad --s-par-grid"),
    (["measure", "decompose", "-m", "tiny-llama", "--value-space", "flat"], "unknown value space 'flat'"),
])
def test_cli_value_space_errors_are_one_line(args, msg, tmp_path, monkeypatch, capsys):
    from tests.cli_helpers import run_cli

    code, _, err = run_cli(monkeypatch, capsys, *args, *(["--out", str(tmp_path / "s.json")] if "sweep" in args
                                                          else []))
    assert code == 2 and msg in err and "Traceback" not in err, err
    assert not (tmp_path / "s.json").exists()


def _first_visible(mask: torch.Tensor) -> set[tuple[int, int]]:
    """(row, position) of each row's first unpadded token: it sees only itself under a causal mask."""
    return {(b, int(mask[b].nonzero()[0])) for b in range(mask.shape[0])}


@pytest.mark.parametrize("space,padded", [("concat", True), ("concat", False), ("head", True)])
def test_c_direction_leaves_out_tokens_that_see_only_themselves(tiny_model, space, padded):
    """c_t = o_t − A_tt v_t is zero for a token that sees only itself: its ratio and |cos| are left out
    (counted n − 2 here), and the c ratio mean equals a float64 loop over the other tokens."""
    m, _ = tiny_model("llama")
    an = anatomy(m)
    ids, mask = _ids()
    if not padded:
        mask = torch.ones_like(mask)
    calls = []
    rm = add_attention_handler(an.blocks[1].attn, lambda c, p: (calls.append(c), p(c))[1])
    meas = DirectionalMeasure(layers=[1], residual=False, value_space=space)
    try:
        with steer(m, meas), torch.no_grad():
            m(input_ids=ids, attention_mask=mask)
    finally:
        rm()
    w = attention_weights(calls[0]).double()
    v = repeat_kv(calls[0].value, calls[0].n_rep).double()
    alone = _first_visible(mask)
    heads = [list(range(an.n_heads))] if space == "concat" else [[h] for h in range(an.n_heads)]
    rows = meas.rows()
    assert len(rows) == len(heads)
    for row, hs in zip(rows, heads, strict=True):
        ratios = []
        for b in range(ids.shape[0]):
            for t in range(ids.shape[1]):
                if not mask[b, t] or (b, t) in alone:
                    continue
                o = torch.cat([w[b, h, t] @ v[b, h] for h in hs])
                vt = torch.cat([v[b, h, t] for h in hs])
                c = o - torch.cat([w[b, h, t, t] * v[b, h, t] for h in hs])
                par = (c @ vt) / (vt @ vt) * vt
                ratios.append((par.norm() / (c - par).norm()).item())
        assert row["c_ratio_n"] == row["n_tokens"] - len(alone) == len(ratios)
        assert row["c_ratio_mean"] == pytest.approx(np.mean(ratios), rel=1e-4)


def test_rounding_in_the_self_weight_does_not_make_a_zero_c_count(tiny_model, monkeypatch):
    """A_tt a few ulps below 1, differently per head (as a fused kernel's log-sum-exp gives it), leaves a
    c_t = (1 − A_tt) v_t on a token that sees only itself that is not parallel to the concatenated v_t; it
    is still zero by construction and left out."""
    import geosteer.directional.measure as measure

    real = measure.self_weight

    def rounded(call, *a, **k):
        w = real(call, *a, **k)
        h = torch.arange(1, w.shape[1] * w.shape[2] + 1, dtype=w.dtype).reshape(1, w.shape[1], w.shape[2], 1)
        return w * (1 - 1e-5 * h)

    monkeypatch.setattr(measure, "self_weight", rounded)
    m, _ = tiny_model("llama")
    ids, mask = _ids()
    meas = DirectionalMeasure(layers=[1], residual=False, value_space="concat")
    with steer(m, meas), torch.no_grad():
        m(input_ids=ids, attention_mask=mask)
    (row,) = meas.rows()
    assert row["c_ratio_n"] == row["c_abs_cos_n"] == row["n_tokens"] - 2
