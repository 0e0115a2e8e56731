"""The ladder's pretraining item (3.27): its cost predictor (paper/studies/ladder/pretrain_cost.py) and its
study in paper/studies/ladder/run.sh (name check, a rung whose results file holds every run is skipped)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
from pathlib import Path

import pytest

from geosteer_paper.reproduction.ladder import load_ladder
from studies.ladder.pretrain_cost import main, predict

REPO = Path(__file__).resolve().parents[3]


def test_predict_scales_each_measured_piece_by_the_budget():
    m = {"load_s": 2.0, "step_s": 0.5, "eval_s": 3.0, "proxy_s": 4.0}
    p = predict(m, steps=1000, eval_every=100, proxy_n=200, timed_proxy_n=20, runs=6)
    assert p["evaluations_per_run"] == 10  # steps 100, 200, ..., 1000
    assert p["per_run_s"] == pytest.approx(1000 * 0.5 + 10 * 3.0 + 10 * 4.0)
    assert p["total_s"] == pytest.approx(2.0 + 6 * 570.0)
    odd = predict(m, steps=1050, eval_every=100, proxy_n=20, timed_proxy_n=20, runs=1)
    assert odd["evaluations_per_run"] == 11  # ten on the grid and one at the last step
    assert odd["per_run_s"] == pytest.approx(1050 * 0.5 + 11 * 3.0 + 4.0)


def test_a_tiny_timing_prints_both_clocks_and_their_predictions(capsys):
    main(["--d-model", "16", "--layers", "1", "--timed-steps", "2", "--timed-proxy-n", "2", "--steps", "30",
          "--eval-every", "10", "--proxy-n", "4", "--runs", "2"])
    out = json.loads(capsys.readouterr().out)
    assert out["params"] > 0 and out["budget"] == {"steps": 30, "eval_every": 10, "proxy_n": 4, "runs": 2}
    for clock in ("wall", "cpu"):
        got, pred = out["measured"][clock], out["predicted"][clock]
        assert set(got) == {"load_s", "step_s", "eval_s", "proxy_s", "loop_s"} and min(got.values()) >= 0
        assert pred["evaluations_per_run"] == 3 and pred["total_s"] >= pred["per_run_s"] * 2


@pytest.mark.parametrize("bad", [["--layers", "0"], ["--variant", "nope"], ["--timed-steps", "0"]])
def test_bad_input_is_one_line_and_exit_2(bad, capsys):
    with pytest.raises(SystemExit) as e:
        main(["--d-model", "16", "--layers", "1", *bad])
    assert e.value.code == 2 and len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.fixture
def run_sh(tmp_path):
    """run.sh pretrain with a stand-in python that runs ``-c`` checks and only echoes a study's command, and a
    costs log of its own, so no test trains a model or writes the ladder's log."""
    fake = tmp_path / "bin"
    fake.mkdir()
    real = REPO / ".venv/bin/python"
    (fake / "python").write_text(f'#!/bin/bash\n[ "$1" = -c ] && exec {real} "$@"\necho "would train: $*"\n')
    (fake / "python").chmod(0o755)
    costs = tmp_path / "costs.csv"

    def call(*models: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "BIN": str(fake), "COSTS": str(costs), "THREADS": "2"}
        return subprocess.run(["bash", str(REPO / "paper/studies/ladder/run.sh"), "pretrain", *models],
                              capture_output=True, text=True, timeout=120, env=env)

    call.costs = costs
    return call


def test_run_sh_refuses_a_name_that_is_not_a_byte_model_size(run_sh):
    r = run_sh("byte-d192")
    assert r.returncode == 2 and "not byte-dDxL" in r.stdout and "would train" not in r.stdout


def test_run_sh_runs_the_criterions_command_and_logs_it(run_sh):
    item = next(it for it in load_ladder().items if it.slug == "pretrain")
    want = item.command.format(d=8, layers=1)
    r = run_sh("byte-d8x1")  # a size with no results file
    assert r.returncode == 0 and f"would train: {want.removeprefix('python ')}" in r.stdout
    rows = list(csv.DictReader(run_sh.costs.open()))
    assert [(x["study"], x["model"], x["exit"], x["command"]) for x in rows] == [
        ("pretrain", "byte-d8x1", "0", want)]


def test_run_sh_skips_a_rung_whose_file_holds_every_run(run_sh):
    # the committed d128 x 4 rung: every (variant, seed) of the criterion's command, at 1000 steps
    assert (REPO / "docs/results/ladder/pretrain/byte-d128x4.json").is_file()
    r = run_sh("byte-d128x4")
    assert r.returncode == 0 and "skip byte-d128x4" in r.stdout and "would train" not in r.stdout
    assert not run_sh.costs.exists() or len(run_sh.costs.read_text().splitlines()) == 1  # header only
