"""``geosteer report`` cannot be stalled or crashed by a results file: a FIFO or ``/dev/zero`` in place of
one, deep JSON, lone surrogates and rows with extra cells are one line (exit 2) at once; nulls where numbers
belong, a CSV cell over csv's own 128 KiB default and a non-text title are read, not a traceback."""

from __future__ import annotations

import json
import os

import pytest

from geosteer.viz.results import is_result_file, load_tidy
from tests.cli_helpers import one_line_exit_2, run_cli


def _hostile(tmp_path, name: str):
    p = tmp_path / name
    if name == "fifo.json":
        os.mkfifo(p)
    elif name == "zero.json":
        p.symlink_to("/dev/zero")
    elif name == "deep.json":
        p.write_text("[" * 100_000 + "]" * 100_000)
    elif name == "surrogate.json":
        p.write_text('{"rows": [{"a": "caf\\ud800"}]}')
    elif name == "cells.csv":
        p.write_text("a,b\n1,2,3\n")
    return p


@pytest.mark.parametrize("name, needle", [("fifo.json", "FIFO"), ("zero.json", "device"),
                                          ("deep.json", "nested deeper"), ("surrogate.json", "surrogate"),
                                          ("cells.csv", "more cells")])
def test_hostile_result_files_are_one_line(tmp_path, monkeypatch, capsys, name, needle):
    p = _hostile(tmp_path, name)
    code, _, err = run_cli(monkeypatch, capsys, "report", str(p), "--out", str(tmp_path / "r.html"))
    one_line_exit_2(code, err)
    assert needle in err and not (tmp_path / "r.html").exists()
    assert not is_result_file(p)  # what the studio lists


def test_nulls_big_cells_and_odd_titles_are_read(tmp_path, monkeypatch, capsys):
    nulls = tmp_path / "nulls.json"
    nulls.write_text(json.dumps({"meta": {"title": 5, "axes": None},
                                 "rows": [{"layer": None, "ppl": None}, {"layer": 0, "ppl": 2.0},
                                          {"layer": 1, "ppl": 3.0}]}))
    big = tmp_path / "big.csv"
    big.write_text("layer,ppl,note\n0,1.5," + "x" * 200_000 + "\n1,2.5,y\n")
    assert load_tidy(nulls).meta["title"] == "5"
    assert len(load_tidy(big).rows[0]["note"]) == 200_000
    code, out, err = run_cli(monkeypatch, capsys, "report", str(nulls), str(big), "--out", str(tmp_path / "r.html"))
    assert code == 0, err
    assert (tmp_path / "r.html").read_text().startswith("<!")
