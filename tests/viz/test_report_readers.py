"""`geosteer report` on what geosteer and lm-eval write: settings are axes (never metrics), lm-eval's
``results_*.json`` becomes one row per task, and the studio lists only files the reader can open.

The lm-eval file comes from ``geosteer eval`` (lm-eval's own CLI with ``--model geosteer`` registered), run
in this process on a tiny model and a local task, with lm-eval's task index kept to that task's folder (its
default index parses every built-in task's YAML, about half a minute of CPU, for nothing the test reads).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from geosteer.io_utils import write_records
from geosteer.viz.results import auto_figures, is_result_file, load_tidy
from tests.cli_helpers import run_cli

TASKS = Path(__file__).resolve().parents[1] / "data" / "lm_eval"


def _axes(fig) -> tuple[str, str]:
    return fig.layout.xaxis.title.text, fig.layout.yaxis.title.text


def test_directional_sweep_file_gives_one_sweep_per_setting(tmp_path):
    from geosteer import load_model
    from geosteer_paper.directional.sweep import run_sweep, sweep_settings

    model, tok = load_model("tiny-llama")
    ids = torch.randint(0, 200, (66,), generator=torch.Generator().manual_seed(0))
    settings = [c for c in sweep_settings(["attn_out"], par_grid=[0.0, 2.0], perp_grid=[0.0, 0.5])
                if c.site == "attn_out"]
    out = tmp_path / "sweep.json"
    run_sweep(model, tok, ids, settings, out, context=32, stride=32, log=lambda _: None)
    figs = auto_figures(load_tidy(out))
    axes = [_axes(f) for f in figs]
    assert ("s_par", "ppl") in axes and ("s_perp", "ppl") in axes
    assert all(y not in ("s_par", "s_perp") for _, y in axes)  # a setting is never plotted as a metric
    rows = json.loads(out.read_text())["rows"]
    for fig in figs:
        x, y = _axes(fig)
        other = "s_perp" if x == "s_par" else "s_par"
        trace = next(t for t in fig.data if t.name == "site=attn_out")
        # the s⊥ sweep holds s∥ at 1 (and vice versa): each point is one row of the file, not an average
        want = {r[x]: r[y] for r in rows if r["site"] == "attn_out" and r[other] == 1.0}
        assert dict(zip(trace.x, trace.y, strict=True)) == pytest.approx(want)


def test_dynamics_gains_file_plots_loss_against_each_gains_value(tmp_path):
    from typer.testing import CliRunner

    from geosteer.cli import app

    out = tmp_path / "gains.json"
    r = CliRunner().invoke(app, ["study", "dynamics", "gains", "-m", "tiny-llama", "--values", "0,1,2",
                                 "--tokens", "64", "--context", "32", "-o", str(out)])
    assert r.exit_code == 0, r.output
    figs = auto_figures(load_tidy(out))
    assert {_axes(f) for f in figs} == {("value", "loss"), ("value", "loss_increase")}
    rows = json.loads(out.read_text())["rows"]
    trace = next(t for t in figs[0].data if t.name == "gain=alpha_ffn")
    assert list(trace.x) == [0.0, 1.0, 2.0]
    assert list(trace.y) == pytest.approx([r[_axes(figs[0])[1]] for r in rows if r["gain"] == "alpha_ffn"])


def test_grid_keeps_other_settings_as_line_groups(tmp_path):
    rows = [{"alpha": a, "beta": b, "loss": a * 10 + b} for a in (0.0, 0.5, 1.0) for b in (1.0, 2.0)]
    figs = auto_figures(load_tidy(write_records(tmp_path / "grid.json", rows, {})))
    assert [_axes(f) for f in figs] == [("alpha", "loss")]
    assert {t.name for t in figs[0].data} == {"beta=1.0", "beta=2.0"}


def test_declared_axes_win(tmp_path):
    rows = [{"layer": lay, "width": w, "err": lay + w} for lay in range(3) for w in (4, 8, 16)]
    figs = auto_figures(load_tidy(write_records(tmp_path / "w.json", rows, {"axes": ["width"]})))
    assert [_axes(f)[0] for f in figs] == ["width"]
    assert all(t.name.startswith("layer=") for t in figs[0].data)


def test_geosteer_eval_cli_then_report_and_studio_list(tmp_path, monkeypatch, capsys):
    pytest.importorskip("lm_eval")
    from lm_eval.tasks import TaskManager

    stock_init = TaskManager.__init__

    def local_tasks_only(self, *args, **kwargs):
        stock_init(self, *args, **{**kwargs, "include_defaults": False})

    monkeypatch.setattr(TaskManager, "__init__", local_tasks_only)
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(name, "1")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "lmeval"
    code, _, err = run_cli(monkeypatch, capsys, "eval", "--model", "geosteer", "--model_args",
                           "pretrained=tiny-llama,scale_par=0.5", "--tasks", "geosteer_test_mc", "--include_path",
                           str(TASKS), "--limit", "4", "--output_path", str(out))
    assert code == 0, err[-2000:]
    files = list(out.rglob("results_*.json"))
    assert len(files) == 1
    raw = json.loads(files[0].read_text())
    assert raw["config"]["model"] == "geosteer"
    res = load_tidy(files[0])
    assert res.meta["model"] == "geosteer" and "scale_par" in res.meta["model_args"]
    (row,) = res.rows
    assert row["task"] == "geosteer_test_mc" and row["n"] == 4
    assert row["acc"] == raw["results"]["geosteer_test_mc"]["acc,none"]
    assert row["acc_norm_stderr"] == raw["results"]["geosteer_test_mc"]["acc_norm_stderr,none"]

    pytest.importorskip("fastapi")
    from geosteer.studio.pages import ResultPages

    (out / "notes.json").write_text('{"free": "form"}')
    assert not is_result_file(out / "notes.json")
    listed = {r["name"] for r in ResultPages([out]).list()}
    assert listed == {files[0].name}
    assert "geosteer_test_mc" in ResultPages([out]).page_html(f"0/{files[0].relative_to(out).as_posix()}")


def test_png_names_say_what_the_figure_shows():
    from geosteer.viz.report import png_name

    assert png_name(2, 1, "sweep [s_perp sweep]: ppl vs s_perp") == "s02_f1-ppl-vs-s_perp.png"
    assert png_name(0, 0, "decomposition: parallel ratio / layer") == "s00_f0-parallel-ratio-layer.png"
    assert png_name(3, 0, "") == "s03_f0.png"
