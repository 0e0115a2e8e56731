"""Localisation studies: applied strength (Table 6), head localisation (Fig. 7), diagonal study (Fig. 4)."""

import pytest
import torch
from typer.testing import CliRunner

from geosteer.attention import stock_attention
from geosteer.cli import app
from geosteer.directional.sites import ComponentScale
from geosteer.interventions import steer
from geosteer.models.anatomy import anatomy
from geosteer_paper.directional.diagonal import output_projection
from geosteer_paper.directional.figures import diagonal_maps_figure, head_localisation_figure
from geosteer_paper.directional.views import applied_strength, diagonal_study, head_localisation, head_summary
from geosteer_paper.reproduction.references import capture_call
from tests.conftest import random_ids


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gpt2"])
def test_applied_strength_residual_is_cosine(tiny_model, name):
    """attn_out s∥ = 0 on one layer removes y∥: ‖ỹ−y‖/‖y‖ = |cos(y, z)|, ‖ỹ‖/‖y‖ = sin, by plain hooks."""
    m, _ = tiny_model(name)
    ids = random_ids(1, 16, seed=5)
    blk = anatomy(m).blocks[1]
    got = {}
    h1 = blk.layer.register_forward_pre_hook(
        lambda mod, a, kw: got.__setitem__("z", (a[0] if a else kw["hidden_states"]).double()), with_kwargs=True)
    h2 = blk.attn.register_forward_hook(lambda mod, a, out: got.__setitem__("y", out[0].double()))
    try:
        with torch.no_grad():
            m(input_ids=ids)
    finally:
        h1.remove()
        h2.remove()
    cos = torch.nn.functional.cosine_similarity(got["y"], got["z"], dim=-1).abs().flatten()
    row = applied_strength(m, ids, ["attn_out"], 0.0, layers=[1])[-1]
    assert row["layer"] == -1 and row["tokens"] == ids.numel()
    assert abs(row["perturb_norm"] - cos.mean().item()) < 1e-5
    assert abs(row["perturb_energy"] - (cos ** 2).mean().item()) < 1e-5
    assert abs(row["retained_norm"] - (1 - cos ** 2).sqrt().mean().item()) < 1e-5


def test_applied_strength_value_site_matches_handler(tiny_model):
    """Value site, one layer: W_O applied to the handler's edited vs stock aggregate of the captured call."""
    m, _ = tiny_model("tiny-llama")
    ids = random_ids(1, 16, seed=5)
    blk = anatomy(m).blocks[2]
    call = capture_call(m, 2, ids)
    stock, _ = stock_attention(call)
    edited, _ = ComponentScale("value_exclude_self", 0.0)._value_handler()(call, stock_attention)
    proj = output_projection(blk.attn)
    with torch.no_grad():
        y = proj(stock.reshape(*stock.shape[:2], -1)).double()
        yt = proj(edited.reshape(*edited.shape[:2], -1)).double()
    p = ((yt - y).norm(dim=-1) / y.norm(dim=-1)).flatten()
    row = applied_strength(m, ids, ["value_exclude_self"], 0.0, layers=[2])[0]
    assert row["layer"] == 2
    assert abs(row["perturb_norm"] - p.mean().item()) < 1e-5
    assert abs(row["retained_norm"] - (yt.norm(dim=-1) / y.norm(dim=-1)).mean().item()) < 1e-5


def test_head_localisation_rows_and_joint(tiny_model):
    m, _ = tiny_model("tiny-qwen2")
    ids = random_ids(2, 12, seed=5)
    n = anatomy(m).n_heads
    rows = head_localisation(m, ids, "value_exclude_self", 0.0, layers=[0, 1], log=lambda s: None)
    assert len(rows) == 2 * (n + 1)
    with torch.no_grad():
        base = m(input_ids=ids).logits
        with steer(m, ComponentScale("value_exclude_self", 0.0, layers=[1])):
            joint = m(input_ids=ids).logits
    ce = lambda lg: torch.nn.functional.cross_entropy(lg[:, :-1].reshape(-1, lg.shape[-1]),  # noqa: E731
                                                    ids[:, 1:].reshape(-1)).item()
    r = next(r for r in rows if r["layer"] == 1 and r["head"] == -1)
    assert abs(r["delta_loss"] - (ce(joint) - ce(base))) < 1e-6
    single = [r["delta_loss"] for r in rows if r["layer"] == 1 and r["head"] >= 0]
    assert len(set(single)) > 1
    s = head_summary(rows)
    assert [x["layer"] for x in s] == [0, 1] and s[1]["single_min"] == min(single)
    fig = head_localisation_figure(rows)
    assert len(fig.data) == 4


def test_diagonal_study_maps(tiny_model):
    m, _ = tiny_model("tiny-llama")
    ids = random_ids(1, 10, seed=5)
    rows, maps = diagonal_study(m, ids, layers=[0, 1], s_par=0.0, map_layer=1, map_head=1)
    assert {r["form"] for r in rows} == {"residual", "value_exclude_self", "value_full"}
    base = {(r["query"], r["key"]): r["weight"] for r in maps if r["view"] == "baseline"}
    for q in range(10):
        assert abs(sum(w for (i, _), w in base.items() if i == q) - 1) < 1e-6
    val = {(r["query"], r["key"]): r["weight"] for r in maps if r["view"] == "value_full"}
    off = [k for k in base if k[0] != k[1]]
    assert all(val[k] == base[k] for k in off)  # only the diagonal moves
    assert abs(val[(0, 0)]) < 1e-9  # position 0 sees only itself: o = v, removing o∥ leaves Ã_00 = 0
    fig = diagonal_maps_figure(maps)
    assert len(fig.data) == 3


def _run_cli(monkeypatch, capsys, *args):
    from tests.cli_helpers import run_cli

    code, out, err = run_cli(monkeypatch, capsys, *args)
    return code, out + err


@pytest.mark.parametrize("args,needle", [
    (["heads", "--heads", "99", "--layers", "0"], "head 99 out of range"),
    (["heads", "--site", "attn_out"], "value site"),
    (["heads", "--site", "nosuch"], "unknown site"),
    (["strength", "--sites", "nosuch"], "unknown site"),
    (["strength", "--sites", "mlp_out"], "applied strength is defined"),
    (["diagonal", "--map-head", "-1"], "bad head spec '-1'"),
    (["diagonal", "--map-layer", "99"], "layer 99 out of range"),
    (["plot", "nosuch", "x.json", "--out", "x.html"], "unknown figure kind"),
    (["ppl", "--corpus", "heldout", "--set", "scale_site=value_full", "--set", "scale_value_space=flat"],
     "unknown value space"),
    (["strength", "--value-space", "flat"], "unknown value space"),
])
def test_cli_bad_input_exits_2(monkeypatch, capsys, tmp_path, args, needle):
    out = tmp_path / "r.json"
    extra = ["-m", "tiny-llama"] if args[0] != "plot" else []
    extra += ["--out", str(out)] if args[0] in ("heads", "strength", "diagonal") else []
    noun = [] if args[0] == "ppl" else ["study", "directional"]  # the paper studies' spelling
    code, text = _run_cli(monkeypatch, capsys, *noun, *args, *extra)
    assert code == 2, text
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], text
    assert not out.exists()


def test_applied_strength_concat_differs(tiny_model):
    m, _ = tiny_model("tiny-llama")
    ids = random_ids(1, 16, seed=5)
    head = applied_strength(m, ids, ["value_exclude_self"], 0.0, layers=[1])[-1]
    cat = applied_strength(m, ids, ["value_exclude_self"], 0.0, layers=[1], value_space="concat")[-1]
    assert head["value_space"] == "head" and cat["value_space"] == "concat"
    assert abs(head["perturb_norm"] - cat["perturb_norm"]) > 1e-4


def test_cli_heads_and_plot(tmp_path):
    out = tmp_path / "h.json"
    res = CliRunner().invoke(app, ["study", "directional", "heads", "-m", "tiny-llama", "--layers", "0-1",
                                   "--texts", "2", "--text-len", "12", "--out", str(out),
                                   "--figure", str(tmp_path / "h.html")])
    assert res.exit_code == 0, res.output
    assert out.is_file() and (tmp_path / "h.html").is_file()
    res = CliRunner().invoke(app, ["study", "directional", "plot", "heads", str(out),
                                   "--out", str(tmp_path / "g.html")])
    assert res.exit_code == 0, res.output
