"""``geosteer study report`` cannot be stalled or crashed by its inputs: a FIFO, a device, deep JSON, a huge
CSV cell or a null where a number belongs make that item "not run" with a one-line reason (the report is
still written); an item file whose pattern could backtrack for ever, or that is itself hostile, is refused
in one line."""

from __future__ import annotations

import copy
import json
import os

import pytest

from geosteer_paper.reproduction import load_items
from tests.cli_helpers import one_line_exit_2, run_cli


def _item(item_id: str, results_file: str, query: dict) -> dict:
    shipped = next(i for p in load_items() for i in p.items if i.id == "1.29")
    doc = copy.deepcopy(shipped.model_dump(exclude_none=True))
    doc.update(id=item_id, results_file=results_file, ours={"forward_ratio": query})
    return doc


def _items_file(tmp_path, items: list[dict]):
    p = tmp_path / "items.json"
    p.write_text(json.dumps({"number": 1, "paper": "manifold", "title": "t", "items": items}))
    return p


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "root"
    r.mkdir()
    os.mkfifo(r / "fifo.json")
    (r / "zero.json").symlink_to("/dev/zero")
    (r / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (r / "null.json").write_text(json.dumps({"ratio": None}))
    (r / "cell.csv").write_text("ratio,x\n1.5," + "y" * (2 << 20) + "\n")
    (r / "long.txt").write_text("forward_512_ratio: 1.5 " + "a" * 5000 + "\n")
    (r / "ok.txt").write_text("forward_512_ratio: 1.5\n")
    return r


def test_hostile_results_files_are_not_run_with_a_reason(root, tmp_path, monkeypatch, capsys):
    items = [_item("1.1", "fifo.json", {"path": "ratio"}), _item("1.2", "zero.json", {"path": "ratio"}),
             _item("1.3", "deep.json", {"path": "ratio"}), _item("1.4", "null.json", {"path": "ratio"}),
             _item("1.5", "cell.csv", {"field": "ratio"}),
             _item("1.6", "long.txt", {"regex": "forward_512_ratio: ([0-9.]+)"}),
             _item("1.7", "ok.txt", {"regex": "forward_512_ratio: ([0-9.]+)"})]
    out = tmp_path / "r.json"
    code, _, err = run_cli(monkeypatch, capsys, "study", "report", "--items", str(_items_file(tmp_path, items)),
                           "--results-root", str(root), "--json", "--out", str(out))
    assert code == 0, err
    recs = {r["id"]: r for r in json.loads(out.read_text())["items"]}
    why = {k: r["why"] for k, r in recs.items()}
    assert recs["1.1"]["status"] == "not run" and "FIFO" in why["1.1"]
    assert recs["1.2"]["status"] == "not run" and "device" in why["1.2"]
    assert recs["1.3"]["status"] == "not run" and "nested deeper" in why["1.3"]
    assert recs["1.4"]["status"] == "not run" and "not a finite number" in why["1.4"]
    assert recs["1.5"]["status"] == "not run" and "CSV" in why["1.5"]
    assert recs["1.6"]["status"] == "not run" and "longer than" in why["1.6"]
    assert recs["1.7"]["status"] != "not run" and recs["1.7"]["ours"] == {"forward_ratio": 1.5}
    assert all("\n" not in w for w in why.values())


@pytest.mark.parametrize("pattern", [r"(a+)+$", r"^(a|aa)*(b)$", r"(x)\1"])
def test_item_patterns_that_can_backtrack_are_refused(root, tmp_path, monkeypatch, capsys, pattern):
    items = [_item("1.1", "ok.txt", {"regex": pattern})]
    code, _, err = run_cli(monkeypatch, capsys, "study", "report", "--items", str(_items_file(tmp_path, items)),
                           "--results-root", str(root), "--out", str(tmp_path / "r.md"))
    one_line_exit_2(code, err)
    assert "item file items.json" in err and not (tmp_path / "r.md").exists()


def test_hostile_item_files_are_one_line(tmp_path, monkeypatch, capsys):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    surrogate = tmp_path / "s.json"
    surrogate.write_text('{"number": 1, "paper": "caf\\ud800", "title": "t", "items": []}')
    for f in (deep, surrogate):
        code, _, err = run_cli(monkeypatch, capsys, "study", "report", "--items", str(f), "--out",
                               str(tmp_path / "r.md"))
        one_line_exit_2(code, err)
