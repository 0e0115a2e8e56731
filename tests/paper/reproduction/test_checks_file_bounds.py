"""``geosteer study report`` and the paper's other read-back files: a pipe, a device, deep nesting or a file
that is not the records it should be are one line (no hang, no traceback)."""

from __future__ import annotations

import json
import os
import time
from importlib import resources

import pytest

from geosteer.errors import GeosteerError
from tests.cli_helpers import one_line_exit_2, run_cli


def _hostile(path, kind: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    elif kind == "deep":
        path.write_text("[" * 100_000 + "]" * 100_000)
    elif kind == "surrogate":
        path.write_text('{"rows": [{"item": "1.1", "check": "\\ud800"}]}')
    else:
        path.write_text('{"rows": [{"item": "1.1", "check": [], "family": {}, "max_abs_error": 0, '
                        '"tolerance": 1}]}')


NEEDLE = {"fifo": "FIFO", "zero": "a device", "deep": "nested deeper", "surrogate": "surrogate"}


@pytest.mark.parametrize("kind", ["fifo", "zero", "deep", "surrogate", "unhashable"])
def test_study_report_on_a_hostile_checks_file(tmp_path, monkeypatch, capsys, kind):
    root = tmp_path / "root"
    _hostile(root / "docs" / "results" / "checks.json", kind)
    items = tmp_path / "items.json"
    shipped = json.loads((resources.files("geosteer_paper.reproduction") / "items" / "manifold.json")
                         .read_text(encoding="utf-8"))
    items.write_text(json.dumps({**shipped, "items": [i for i in shipped["items"] if i["id"] == "1.1"]}))
    t0 = time.monotonic()
    code, _, err = run_cli(monkeypatch, capsys, "study", "report", "--items", str(items), "--results-root",
                           str(root), "--json", "--out", str(tmp_path / "r.json"))
    assert time.monotonic() - t0 < 60
    if kind == "unhashable":  # records of the wrong types are not records: the item has none
        assert code == 0, err
        (rec,) = json.loads((tmp_path / "r.json").read_text())["items"]
        assert rec["status"] == "not run"
        return
    one_line_exit_2(code, err)
    assert "checks.json" in err and NEEDLE[kind] in err and not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("kind", ["fifo", "zero", "deep"])
def test_the_papers_other_read_back_files(tmp_path, kind):
    from geosteer_paper.directional.sweep import _earlier_rows
    from geosteer_paper.dynamics.studies.prefix import _prefix_lines
    from geosteer_paper.dynamics.studies.significance import _read_rows
    from geosteer_paper.lm_eval_runs import newest_results
    from geosteer_paper.vectors.frontier_study import _cached_point

    readers = [_earlier_rows, _read_rows, _cached_point, lambda p: newest_results(p.parent)]
    if kind != "deep":  # a prefix file is text, not JSON
        readers.append(lambda p: _prefix_lines(p, 2, 4))
    for i, read in enumerate(readers):
        path = tmp_path / str(i) / "results_1.json"
        _hostile(path, kind)
        t0 = time.monotonic()
        with pytest.raises(GeosteerError) as e:
            read(path)
        assert time.monotonic() - t0 < 10 and "\n" not in str(e.value) and NEEDLE[kind] in str(e.value), i
