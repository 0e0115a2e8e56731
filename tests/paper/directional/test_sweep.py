"""``geosteer_paper.directional.sweep``: the paper's grid, the sweep on a tiny model (baseline row, ΔPPL, resume)."""

import json

import pytest

from geosteer_paper.directional.sweep import sweep_settings


def test_sweep_grid_is_the_papers():
    s = sweep_settings(["attn_out"])
    par = sorted(c.s_par for c in s if c.site == "attn_out" and c.s_perp == 1.0)
    perp = sorted(c.s_perp for c in s if c.site == "attn_out" and c.s_par == 1.0 and c.s_perp != 1.0)
    assert par == [x / 4 for x in range(-8, 13) if x != 4]
    assert perp == [x / 4 for x in range(0, 9) if x != 4]
    assert {c.site for c in s} == {"attn_out", "value_full", "diag_removal"}


def test_run_sweep_rows_resume_and_delta(tiny_model, tmp_path):
    """The baseline row is the stock model's strided PPL, each setting's ΔPPL is its PPL minus the baseline's
    (both recomputed directly), and a second call with resume adds only the settings not yet in the file."""
    from geosteer.directional.config import ComponentScaleConfig
    from geosteer.directional.sites import ComponentScale
    from geosteer.eval.perplexity import heldout_ids, strided_perplexity
    from geosteer.interventions import steer
    from geosteer_paper.directional.sweep import run_sweep

    model, tok = tiny_model("llama")
    ids = heldout_ids(tok, 48)
    out = tmp_path / "s.json"
    kw = dict(context=32, stride=16, batch_size=2, log=lambda s: None)
    first = ComponentScaleConfig("attn_out", 0.0, 1.0)
    rows = run_sweep(model, tok, ids, [first], out, meta={"m": 1}, **kw)
    base = strided_perplexity(model, tok, ids=ids, context=32, stride=16).ppl
    with steer(model, ComponentScale.from_config(first)):
        ppl = strided_perplexity(model, tok, ids=ids, context=32, stride=16).ppl
    assert [(r["site"], r["s_par"]) for r in rows] == [("none", 1.0), ("attn_out", 0.0)]
    assert rows[0]["ppl"] == pytest.approx(base) and rows[1]["delta_ppl"] == pytest.approx(ppl - base)
    second = ComponentScaleConfig("attn_out", 1.0, 0.5)
    rows2 = run_sweep(model, tok, ids, [first, second], out, **kw)
    assert rows2[:2] == rows and [(r["s_par"], r["s_perp"]) for r in rows2[2:]] == [(1.0, 0.5)]
    doc = json.loads(out.read_text())
    assert doc["rows"] == rows2 and doc["meta"]["tokens"] == 48
