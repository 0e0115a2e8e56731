"""Formula checks: the declared checks match the item files, a wrong formula fails its check, statuses of
check items come from the checks file, and the CLI writes it (synthetic checks only: no model loads)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from geosteer.errors import GeosteerError
from geosteer_paper.reproduction import evaluate_item, load_items
from geosteer_paper.reproduction.checks import CHECKS_FILE, declared_checks, select
from geosteer_paper.reproduction.items import Item
from tests.cli_helpers import one_line_exit_2, run_cli

REPO = Path(__file__).resolve().parents[3]


def test_every_check_item_has_a_declared_check_and_the_shipped_file_covers_them():
    items = {i.id: i for p in load_items() for i in p.items}
    declared = {c.item for c in declared_checks()}
    assert declared == {i for i, it in items.items() if it.check}
    rows = json.loads((REPO / CHECKS_FILE).read_text())["rows"]
    names = {(c.item, c.name) for c in declared_checks()}
    assert {(r["item"], r["check"]) for r in rows} == names  # the shipped file is from the current checks
    for r in rows:
        assert r["pass"] == (r["max_abs_error"] <= r["tolerance"])


def _rows(tmp_path: Path, rows: list[dict]) -> Path:
    (tmp_path / "docs" / "results").mkdir(parents=True)
    (tmp_path / CHECKS_FILE).write_text(json.dumps({"meta": {}, "rows": rows}))
    return tmp_path


def _row(item, family, err, tol=1e-5, check="c"):
    return {"item": item, "check": check, "family": family, "max_abs_error": err, "tolerance": tol,
            "pass": err <= tol}


def test_check_item_status_from_the_checks_file(tmp_path):
    item = Item(id="1.2", name="n", claim="c", reading="r", check=True)
    root = _rows(tmp_path, [_row("1.2", "llama", 2e-6), _row("1.2", "gpt2", 3e-7), _row("1.3", "llama", 1.0)])
    res = evaluate_item("p", item, [root])
    assert res.status == "reproduces" and res.ours == {"max_abs_error": 2e-6}
    assert res.why == "checked: c: max error 2e-06 (tolerance 1e-05) on 2 families"
    assert res.record()["results_file"] == CHECKS_FILE and res.record()["command"].startswith("geosteer study")
    bad = evaluate_item("p", item.model_copy(update={"id": "1.3"}), [root])
    assert bad.status == "diverges" and bad.why.startswith("fails: c on llama")
    none = evaluate_item("p", item.model_copy(update={"id": "1.4"}), [root])
    assert none.status == "not run" and none.ours == {}
    assert evaluate_item("p", item, [tmp_path / "nowhere"]).status == "not run"


def test_check_item_takes_no_results_file():
    with pytest.raises(ValueError, match="a check item takes its status from the checks file"):
        Item(id="1.2", name="n", claim="c", reading="r", check=True, results_file="docs/results/x.json",
             ours={"x": {"path": "a"}}, criteria=[{"kind": "below", "value": "x", "threshold": 1, "claim": "q"}])


def test_a_wrong_formula_fails_its_check(monkeypatch):
    """The checks can fail: a tangential part without the projection, a speed-up off by one part in 1e9."""
    from geosteer.dynamics import parallel, sphere
    from geosteer_paper.dynamics import checks as dynamics_checks

    assert dynamics_checks.sphere_split_vs_numpy() <= 1e-12
    monkeypatch.setattr(sphere, "tangential", lambda u, v: v)
    assert dynamics_checks.sphere_split_vs_numpy() > 0.1
    good = parallel.estimated_speedup
    monkeypatch.setattr(parallel, "estimated_speedup", lambda t, layers: good(t, layers) * (1 + 1e-9))
    assert dynamics_checks.parallel_speedup_vs_loop() > 1e-12


def test_select_refuses_unknown_items_and_families():
    checks = declared_checks()
    assert {c.item for c in select(checks, ["1.2", "3.5"], None)} == {"1.2", "3.5"}
    with pytest.raises(GeosteerError, match="no check for item 9.9; checked items: 1.1"):
        select(checks, ["9.9"], None)
    with pytest.raises(GeosteerError, match="unknown family 'bert'; valid: llama"):
        select(checks, None, ["bert"])


def test_cli_writes_the_records_and_the_report_reads_them(monkeypatch, capsys, tmp_path, tiny_model):
    monkeypatch.setattr("geosteer.models.loading.load_model", lambda name: tiny_model(name))  # the session's
    out = tmp_path / "docs" / "results" / "checks.json"
    out.parent.mkdir(parents=True)
    code, _, err = run_cli(monkeypatch, capsys, "study", "checks", "--only", "1.2,2.15,3.7", "--families", "llama",
                           "--out", str(out))
    assert code == 0, err
    data = json.loads(out.read_text())
    assert [(r["item"], r["family"]) for r in data["rows"]] == [("1.2", "synthetic"), ("2.15", "synthetic"),
                                                                ("3.7", "llama")]
    assert all(r["pass"] for r in data["rows"]) and data["rows"][-1]["max_abs_error"] == 0.0
    assert data["meta"]["command"].startswith("geosteer study checks --only 1.2,2.15,3.7 --families llama")
    rep = tmp_path / "r.json"
    assert run_cli(monkeypatch, capsys, "study", "report", "--results-root", str(tmp_path), "--json",
                   "--out", str(rep))[0] == 0
    status = {r["id"]: r["status"] for r in json.loads(rep.read_text())["items"]}
    assert status["1.2"] == status["2.15"] == status["3.7"] == "reproduces" and status["1.1"] == "not run"


def test_cli_bad_item_is_one_line_exit_2(monkeypatch, capsys, tmp_path):
    out = tmp_path / "c.json"
    code, _, err = run_cli(monkeypatch, capsys, "study", "checks", "--only", "9.9", "--out", str(out))
    one_line_exit_2(code, err)
    assert "no check for item 9.9" in err and not out.exists()


# Diverging items whose reading still names neither a cause nor the experiment that would decide it.
WITHOUT_CAUSE: set[str] = set()


def test_every_diverging_item_states_a_cause_or_the_deciding_experiment():
    from geosteer_paper.reproduction import evaluate_items

    results = evaluate_items(load_items(), [REPO])
    lacking = {r.item.id for r in results if r.status == "diverges"
               and not any(w in r.item.reading for w in ("Cause", "cause", "To decide"))}
    assert lacking <= WITHOUT_CAUSE, (
        f"diverging items {sorted(lacking - WITHOUT_CAUSE)}: say in the reading what causes the divergence "
        "('Cause: ...') or which experiment would decide it ('To decide: ...')")
