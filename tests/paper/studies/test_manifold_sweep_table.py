"""paper/studies/manifold/sweep_table.py: rows carry each run's grid, range and parameters as its artifact
recorded them, and ``vs_first_pct`` compares every row with the first source on the same held-out tokens."""

from __future__ import annotations

import json
import sys

import pytest

from studies.manifold import sweep_table


def _artifact(folder, grid, hi, ppl_after, calibration=None):
    folder.mkdir(parents=True)
    heldout = {"ppl_before": 20.0, "ppl_after": ppl_after,
               "evals": [{"step": 0, "ppl": 20.0, "tokens": 511}, {"step": 4, "ppl": ppl_after, "tokens": 511}]}
    meta = {"command": f"geosteer manifold train --grid {grid}", "calibration": calibration,
            "training": {"tokens": 4096, "config": {"lr": 0.03, "seed": 0}, "heldout": heldout}}
    config = {"grid_size": grid, "n_parameters": 2 * (grid + 3) ** 2, "lo": [-h for h in hi], "hi": hi, "meta": meta}
    (folder / "geosteer_config.json").write_text(json.dumps(config))


def test_rows_read_grid_range_and_compare_with_the_first(tmp_path, monkeypatch, capsys):
    _artifact(tmp_path / "g8", 8, [4.0, 4.0], 16.0)
    _artifact(tmp_path / "g16", 16, [4.0, 4.0], 16.4)
    _artifact(tmp_path / "cal", 8, [6.5, 9.0], 15.2, calibration={"quantile": 0.99})
    out = tmp_path / "table.json"
    argv = ["sweep_table.py", str(tmp_path / "g8"), str(tmp_path / "g16"), str(tmp_path / "cal"), "--out", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    sweep_table.main()
    rows = json.loads(out.read_text())["rows"]
    assert [r["grid"] for r in rows] == [8, 16, 8]
    assert [r["params"] for r in rows] == [242, 722, 242]
    assert [r["calibrated"] for r in rows] == [False, False, True]
    assert rows[2]["hi"] == [6.5, 9.0] and rows[2]["heldout_tokens"] == 511
    assert rows[0]["command"] == "geosteer manifold train --grid 8"
    assert [r["vs_first_pct"] for r in rows] == pytest.approx([0.0, 2.5, -5.0], abs=1e-9)
    assert [r["change_pct"] for r in rows] == pytest.approx([-20.0, -18.0, -24.0], abs=1e-9)
    assert "calibrated (±6.50…±9.00)" in capsys.readouterr().out
