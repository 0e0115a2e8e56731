"""Figures from tidy result files and the self-contained HTML report (no model involved)."""

from __future__ import annotations

import json
import re
import sys

import pytest

from geosteer.errors import GeosteerError
from geosteer.io_utils import write_records
from geosteer.viz.report import build_report
from geosteer.viz.results import auto_figures, load_tidy


def _layer_rows():
    rows = []
    for layer in range(4):
        for comp in ("attn", "mlp"):
            for seed in (0, 1):
                rows.append({"layer": layer, "component": comp, "seed": seed,
                             "parallel_ratio": 0.1 * layer + (0.5 if comp == "mlp" else 0.0) + 0.01 * seed,
                             "norm": float(layer + seed)})
    return rows


def test_layer_curves_one_figure_per_metric_one_line_per_group(tmp_path):
    p = write_records(tmp_path / "decomp.json", _layer_rows(), {"study": "decomposition"})
    figs = auto_figures(load_tidy(p))
    titles = [f.layout.title.text for f in figs]
    assert titles == ["decomposition: parallel_ratio vs layer", "decomposition: norm vs layer"]
    traces = {t.name: t for t in figs[0].data}
    assert set(traces) == {"component=attn", "component=mlp"}
    mlp = traces["component=mlp"]
    assert list(mlp.x) == [0, 1, 2, 3]
    # repeated (layer, group) rows (two seeds) are averaged: independent mean of the raw rows
    for layer, y in zip(mlp.x, mlp.y, strict=True):
        raw = [r["parallel_ratio"] for r in _layer_rows() if r["layer"] == layer and r["component"] == "mlp"]
        assert y == pytest.approx(sum(raw) / len(raw))
    assert list(mlp.error_y.array) == pytest.approx([0.005] * 4)


def test_csv_and_long_format_and_sweep_split_by_layer(tmp_path):
    rows = [{"layer": lay, "scale": s, "metric": m, "value": s * (lay + 1) + (1 if m == "kl" else 0)}
            for lay in (3, 5) for s in (0.0, 0.5, 1.0, 2.0) for m in ("delta_ppl", "kl")]
    p = write_records(tmp_path / "sweep.csv", rows)
    res = load_tidy(p)
    assert isinstance(res.rows[0]["scale"], float) and isinstance(res.rows[0]["layer"], int)
    figs = auto_figures(res)
    # layer has priority as x; the sweep key with few values then splits the lines
    f = figs[0]
    assert f.layout.xaxis.title.text == "layer"
    assert {t.name for t in f.data} == {f"scale={s}" for s in (0.0, 0.5, 1.0, 2.0)}
    assert sorted(f.layout.title.text for f in figs) == ["sweep: delta_ppl vs layer", "sweep: kl vs layer"]


def test_sweep_without_layer_column_uses_the_sweep_key(tmp_path):
    rows = [{"beta": b, "setting": st, "ppl": 10 + b * (2 if st == "a" else 1)} for b in (0.5, 1, 1.5)
            for st in ("a", "b")]
    figs = auto_figures(load_tidy(write_records(tmp_path / "b.json", rows)))
    assert len(figs) == 1 and figs[0].layout.xaxis.title.text == "beta"
    a = next(t for t in figs[0].data if t.name == "setting=a")
    assert list(a.y) == pytest.approx([11, 12, 13])


def test_error_metrics_get_a_shared_panel(tmp_path):
    rows = [{"layer": i, "rel_err_par": 0.1 * i, "rel_err_perp": 0.2 * i, "abs_err": i} for i in range(5)]
    figs = auto_figures(load_tidy(write_records(tmp_path / "c.json", rows)))
    panel = figs[0]
    assert "errors vs layer" in panel.layout.title.text
    assert len(panel.data) == 3 and len(figs) == 4


def test_bad_result_files_raise_clear_errors(tmp_path):
    with pytest.raises(GeosteerError, match="not found"):
        load_tidy(tmp_path / "nope.json")
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(GeosteerError, match="not valid JSON"):
        load_tidy(tmp_path / "x.json")
    (tmp_path / "y.json").write_text(json.dumps({"a": 1}))
    with pytest.raises(GeosteerError, match="not a tidy result file"):
        load_tidy(tmp_path / "y.json")
    (tmp_path / "z.txt").write_text("a")
    with pytest.raises(GeosteerError, match="unsupported"):
        load_tidy(tmp_path / "z.txt")


def test_report_is_self_contained(tmp_path):
    write_records(tmp_path / "res" / "decomp.json", _layer_rows(), {"study": "decomposition"})
    write_records(tmp_path / "res" / "sub" / "sweep.csv", [{"scale": s, "ppl": 10 + s} for s in range(4)])
    out = tmp_path / "report.html"
    summary = build_report([tmp_path / "res"], out, title="T <1>")
    html = out.read_text()
    assert summary["sections"] == 2 and summary["figures"] == 3
    assert "<title>T &lt;1&gt;</title>" in html
    # plotly.js is inline exactly once; nothing is fetched from the network
    assert html.count("<script type='text/javascript'>/**") == 1
    assert not re.search(r"<script[^>]+src=", html)
    from plotly.offline import get_plotlyjs

    rest = html.replace(get_plotlyjs(), "")
    assert "http://" not in rest and "https://" not in rest
    assert len(re.findall(r'class="plotly-graph-div"', html)) == 3
    with pytest.raises(GeosteerError, match=".html"):
        build_report([tmp_path / "res"], tmp_path / "r.pdf")


def test_cli_report_and_error_exit(tmp_path, monkeypatch, capsys):
    from geosteer import cli

    p = write_records(tmp_path / "d.json", _layer_rows())
    out = tmp_path / "r.html"
    monkeypatch.setattr(sys, "argv", ["geosteer", "report", str(p), "--out", str(out), "--json"])
    cli.main()
    assert json.loads(capsys.readouterr().out)["figures"] == 2 and out.is_file()
    missing = str(tmp_path / "missing.json")
    monkeypatch.setattr(sys, "argv", ["geosteer", "report", missing, "--out", str(out)])
    with pytest.raises(SystemExit) as e:
        cli.main()
    assert e.value.code == 2
    assert capsys.readouterr().err.startswith("error: not found")


def test_multi_table_file_with_mean_std_long_format(tmp_path):
    rows = [{"table": "layers", "layer": lay, "metric": m, "mean": lay * (2 if m == "b" else 1), "std": 0.1,
             "n": 64} for lay in range(3) for m in ("a", "b")]
    rows += [{"table": "ov", "layer": lay, "head": h, "ratio": lay + h, "positive": h == 0}
             for lay in range(3) for h in range(2)]
    rows += [{"table": "sweep", "scale": s, "ppl": 10 ** s, "seconds": 3.0 + s} for s in range(4)]
    figs = auto_figures(load_tidy(write_records(tmp_path / "diag.json", rows)))
    titles = [f.layout.title.text for f in figs]
    assert titles == ["diag [table=layers]: a vs layer", "diag [table=layers]: b vs layer",
                      "diag [table=ov]: ratio vs layer", "diag [table=ov]: positive vs layer",
                      "diag [table=sweep]: ppl vs scale"]  # n, head and seconds are not metrics
    b = figs[1].data[0]
    assert list(b.y) == [0, 2, 4] and list(b.error_y.array) == [0.1] * 3  # the row's own std
    pos = figs[3].data[0]
    assert list(pos.y) == [0.5] * 3  # booleans plot as the fraction true (head 0 of 2)
    assert figs[4].layout.yaxis.type == "log"  # ppl spans three decades


def test_many_metrics_become_one_panel(tmp_path):
    rows = [{"layer": lay, **{f"m{i}": lay * i for i in range(1, 9)}} for lay in range(4)]
    figs = auto_figures(load_tidy(write_records(tmp_path / "many.json", rows)))
    assert len(figs) == 1 and len(figs[0].data) == 8 and "8 metrics vs layer" in figs[0].layout.title.text
