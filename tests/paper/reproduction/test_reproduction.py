"""The reproduction report: item data refused when malformed, statuses computed from synthetic results
files, the shipped items, the report's JSON shape and the CLI's bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from geosteer.errors import GeosteerError
from geosteer_paper.reproduction import evaluate_item, load_items, load_paper
from geosteer_paper.reproduction.evaluate import STATUSES, check
from geosteer_paper.reproduction.items import Criterion, Item
from tests.cli_helpers import one_line_exit_2, run_cli

REPO = Path(__file__).resolve().parents[3]


def _item(**over) -> dict:
    base = {"id": "1.1", "name": "n", "claim": "c", "paper_value": 1.0, "results_file": "r.json",
            "ours": {"x": {"path": "a.b"}}, "criteria": [{"kind": "below", "value": "x", "threshold": 2.0}],
            "reading": "r"}
    base.update(over)
    if isinstance(base.get("criteria"), list):  # every criterion quotes the paper's sentence it tests
        base["criteria"] = [c if "claim" in c or not isinstance(c, dict) else {**c, "claim": "the paper says"}
                            for c in base["criteria"]]
    return {k: v for k, v in base.items() if v is not None}


def _paper_text(*items: dict) -> str:
    return json.dumps({"number": 1, "paper": "p", "title": "t", "items": list(items)})


@pytest.mark.parametrize("item, field", [
    (_item(claim=None), "claim"),
    (_item(reading=""), "reading"),
    (_item(criteria=[{"kind": "roughly", "value": "x"}]), "criteria.0.kind"),
    (_item(criteria=[{"kind": "below", "value": "x"}]), "criteria.0"),
    (_item(criteria=[{"kind": "below", "value": "y", "threshold": 1}]), "(item)"),
    (_item(ours={"x": {"regex": "no group"}}), "ours.x"),
    (_item(ours={"x": {"path": "a", "where": {"k": 1}}}), "ours.x"),
    (_item(results_file="/etc/passwd"), "(item)"),
    (_item(results_file="../outside.json"), "(item)"),
    (_item(id="one"), "(item)"),
    (_item(ours={"x": {"path": "a", "code": "__import__('os')"}}), "ours.x.code"),
    (_item(criteria=[{"kind": "below", "value": "x", "threshold": 1, "claim": ""}]), "criteria.0.claim"),
    (_item(criteria=[{"kind": "below", "value": "x", "threshold": 1, "role": "magnitude", "claim": "q"}]), "(item)"),
])
def test_malformed_item_refused_in_one_line_naming_item_and_field(item, field):
    with pytest.raises(GeosteerError) as e:
        load_paper("bad.json", _paper_text(_item(id="1.2"), item))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("item file bad.json: ")
    assert f"item {item.get('id', '#2')}:" in msg and f"field {field}:" in msg


def test_duplicate_ids_wrong_paper_number_and_bad_json_refused():
    with pytest.raises(GeosteerError, match=r"item 1.1: field id: used twice"):
        load_paper("d.json", _paper_text(_item(), _item()))
    with pytest.raises(GeosteerError, match=r"does not start with the paper number 1"):
        load_paper("d.json", _paper_text(_item(id="2.1")))
    with pytest.raises(GeosteerError, match=r"item file d.json: cannot read it as JSON"):
        load_paper("d.json", "{not json")


def _results(tmp_path: Path) -> Path:
    (tmp_path / "r.json").write_text(json.dumps({
        "meta": {"ppl": 11.5, "flag": True},
        "rows": [{"variant": "a", "loss": 1.0}, {"variant": "b", "loss": 3.0}, {"variant": "b", "loss": 5.0}]}))
    (tmp_path / "r.csv").write_text("cond,group,changed,kl\nwall,unsafe,5,0.25\nwall,safe,0,0.125\n")
    (tmp_path / "r.txt").write_text("forward_ratio: 1.455 (min 1.2)\ndecode_ratio: 1.24\n")
    return tmp_path


def _eval(tmp_path, **over):
    return evaluate_item("p", Item.model_validate(_item(**over)), [_results(tmp_path)])


def test_each_status_is_reachable_from_synthetic_files(tmp_path):
    ok = _eval(tmp_path, ours={"x": {"path": "meta.ppl"}})  # 11.5 against the default threshold 2.0
    assert (ok.status, ok.ours) == ("diverges", {"x": 11.5})
    below = [{"kind": "below", "value": "x", "threshold": 12.0}]
    both = below + [{**below[0], "role": "magnitude"}]  # against the paper's own 12.0
    assert _eval(tmp_path, ours={"x": {"path": "meta.ppl"}}, criteria=both, paper_numbers=[12.0]).status == "reproduces"
    # the same headline with no number from the paper reproduces nothing: at most partial
    assert _eval(tmp_path, ours={"x": {"path": "meta.ppl"}}, criteria=below).status == "partial"
    above = [{"kind": "above", "value": "x", "threshold": 12.0}]
    bad = _eval(tmp_path, ours={"x": {"path": "meta.ppl"}}, criteria=above)
    assert bad.status == "diverges" and "x 11.5 > 12" in bad.why
    gone = _eval(tmp_path, results_file="missing.json", criteria=below)
    assert gone.status == "not run" and "missing.json is missing" in gone.why and gone.ours == {}
    nokey = _eval(tmp_path, ours={"x": {"path": "meta.nothere"}}, criteria=below)
    assert nokey.status == "not run" and "'nothere'" in nokey.why
    norow = _eval(tmp_path, ours={"x": {"path": "rows", "where": {"variant": "z"}, "field": "loss"}}, criteria=below)
    assert norow.status == "not run" and "no row matches" in norow.why
    prose = evaluate_item("p", Item.model_validate(_item(results_file=None, ours={}, criteria=[])), [tmp_path])
    assert prose.status == "not run" and prose.ours == {}


def test_queries_read_json_csv_and_text(tmp_path):
    def value(results_file, query):
        r = _eval(tmp_path, results_file=results_file, ours={"x": query},
                  criteria=[{"kind": "below", "value": "x", "threshold": 1e9}])
        assert r.status == "partial" and "holds: x" in r.why, r.why  # read; no paper number, so at most partial
        return r.ours["x"]

    rows = {"path": "rows", "where": {"variant": "b"}, "field": "loss"}
    assert value("r.json", rows) == 3.0
    assert value("r.json", {**rows, "pick": "last"}) == 5.0
    assert value("r.json", {**rows, "pick": "mean"}) == pytest.approx(4.0)
    assert value("r.json", {"path": "rows", "field": "loss", "pick": "max"}) == 5.0
    assert value("r.json", {"path": "rows", "where": {"variant": "b"}, "pick": "count"}) == 2.0
    assert value("r.json", {"path": "rows.-1.loss"}) == 5.0
    assert value("r.csv", {"where": {"group": "safe"}, "field": "kl"}) == 0.125
    assert value("r.csv", {"field": "changed", "pick": "sum"}) == 5.0
    assert value("r.txt", {"regex": r"decode_ratio: ([0-9.]+)"}) == 1.24
    above = [{"kind": "above", "value": "x", "threshold": 0}]
    flag = _eval(tmp_path, ours={"x": {"path": "meta.flag"}}, criteria=above)
    assert flag.status == "not run" and "true/false flag, not a number" in flag.why  # a verdict is not a value


def test_results_root_may_be_the_results_folder_itself(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "r.json").write_text('{"v": 2}')
    item = Item.model_validate(_item(results_file="docs/results/sub/r.json", ours={"x": {"path": "v"}}))
    assert evaluate_item("p", item, [tmp_path]).ours == {"x": 2.0}


@pytest.mark.parametrize("crit, values, holds", [
    ({"kind": "within_rel", "value": "a", "ref": 1.5, "band": 0.2}, {"a": 1.455}, True),  # |1.455-1.5|/1.5 = 0.03
    ({"kind": "within_rel", "value": "a", "ref": 1.5, "band": 0.2}, {"a": 1.85}, False),  # 0.233
    ({"kind": "within_abs", "value": "a", "ref": 0.91, "band": 0.015}, {"a": 0.84}, False),
    ({"kind": "between", "value": "a", "lo": 0.69, "hi": 0.83}, {"a": 0.75}, True),
    ({"kind": "between", "value": "a", "lo": 0.69, "hi": 0.83}, {"a": 0.9833}, False),
    ({"kind": "sign", "value": "a", "sign": -1}, {"a": -0.0288}, True),
    ({"kind": "sign", "value": "a", "sign": -1}, {"a": 0.0}, False),
    ({"kind": "equals", "value": "a", "ref": 10}, {"a": 10.0}, True),
    ({"kind": "order", "values": ["a", "b", "c"]}, {"a": 0.42, "b": 0.03, "c": 0.75}, False),
    ({"kind": "order", "values": ["a", "b", "c"]}, {"a": 0.03, "b": 0.42, "c": 0.75}, True),
    ({"kind": "order", "values": ["a", "b"]}, {"a": 1.0, "b": 1.0}, False),  # strict
    ({"kind": "close", "values": ["a", "b"], "band": 0.05}, {"a": 0.8125, "b": 0.1875}, False),
    ({"kind": "close", "values": ["a", "b"], "band": 0.05}, {"a": 0.8125, "b": 0.79}, True),
    ({"kind": "difference", "values": ["a", "b"], "lo": -2.49, "hi": -1.99}, {"a": 12.92, "b": 11.58}, False),
    ({"kind": "difference", "values": ["a", "b"], "lo": -2.49, "hi": -1.99}, {"a": 12.92, "b": 10.7}, True),
])
def test_criteria_against_hand_computed_cases(crit, values, holds):
    assert check(Criterion.model_validate({**crit, "claim": "q"}), values)[0] is holds


def test_shipped_items_load_and_every_path_and_command_is_well_formed():
    papers = load_items()
    assert [(p.number, len(p.items)) for p in papers] == [(1, 37), (2, 43), (3, 37)]
    for item in (i for p in papers for i in p.items):
        for rel in [item.results_file] + [q.file for q in item.ours.values()]:
            if rel is not None:
                assert rel.startswith("docs/results/") and (REPO / rel).is_file(), (item.id, rel)
        if item.command is not None:
            assert item.command.split()[0] in ("geosteer", "python") or item.command.startswith("OMP_NUM_THREADS="), \
                (item.id, item.command)
            assert "\n" not in item.command


def test_report_json_schema_and_no_wired_item_is_unreadable(monkeypatch, capsys, tmp_path):
    out = tmp_path / "report.json"
    code, _, err = run_cli(monkeypatch, capsys, "study", "report", "--results-root", str(REPO), "--json",
                           "--out", str(out))
    assert code == 0, err
    data = json.loads(out.read_text())
    assert set(data) == {"command", "counts", "items"} and len(data["items"]) == 117
    need = {"paper", "item", "claim", "paper_value", "ours", "status", "command", "results_file"}
    for rec in data["items"]:
        assert need <= set(rec) and rec["status"] in STATUSES
        if rec["results_file"] is None:
            assert rec["status"] == "not run" and rec["ours"] is None
        else:  # every wired query reads a number from the shipped results
            assert rec["status"] != "not run", (rec["item"], rec["why"])
            assert all(isinstance(v, float) for v in rec["ours"].values())
    total = data["counts"][-1]
    assert total["paper"] == "all" and total["items"] == 117
    assert sum(total[s] for s in STATUSES) == 117


def test_markdown_and_html_reports(monkeypatch, capsys, tmp_path):
    md, page = tmp_path / "r.md", tmp_path / "r.html"
    assert run_cli(monkeypatch, capsys, "study", "report", "--results-root", str(tmp_path), "--out", str(md))[0] == 0
    text = md.read_text()
    assert text.startswith("# Reproduction report") and "| 1.7 Table 1 perplexity gain |" in text
    assert "✔ reproduces" not in text  # an empty results root: nothing is read, so nothing reproduces
    md2 = tmp_path / "r2.md"
    assert run_cli(monkeypatch, capsys, "study", "report", "--html", str(page), "--out", str(md2),
                   "--results-root", str(REPO))[0] == 0
    assert "✔ reproduces" in md2.read_text()
    html = page.read_text()
    assert html.startswith("<!doctype html>") and "<script src" not in html and "<link" not in html
    assert html.count("<tr class='reproduces'>") >= 1 and html.count("<tr class='notrun'>") >= 1


def test_study_list_names_the_report(monkeypatch, capsys):
    code, out, _ = run_cli(monkeypatch, capsys, "study", "--list")
    assert code == 0 and "report" in out


@pytest.mark.parametrize("args, says", [
    ([], "give --out FILE"),
    (["--out", "r.txt"], "valid extensions: .md"),
    (["--html", "r.md"], "valid extensions: .html"),
    (["--json", "--out", "r.md"], "JSON records need --json and a .json name"),
    (["--out", "r.json"], "JSON records need --json"),
    (["--json", "--html", "r.html"], "give --out"),
    (["--results-root", "no/such/dir", "--out", "r.md"], "is not a folder"),
    (["--items", "no/such.json", "--out", "r.md"], "no such file"),
])
def test_bad_input_is_one_line_exit_2(monkeypatch, capsys, tmp_path, args, says):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(monkeypatch, capsys, "study", "report", *args)
    one_line_exit_2(code, err)
    assert says in err and not any(tmp_path.iterdir())


def test_malformed_items_file_on_the_cli_is_one_line(monkeypatch, capsys, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(_paper_text(_item(claim=None)))
    code, _, err = run_cli(monkeypatch, capsys, "study", "report", "--items", str(bad), "--out",
                           str(tmp_path / "r.md"))
    one_line_exit_2(code, err)
    assert "item 1.1: field claim" in err and not (tmp_path / "r.md").exists()


def test_item_files_are_package_data():
    import fnmatch

    import tomllib

    data = tomllib.loads((REPO / "paper" / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    globs = data["geosteer_paper"]
    root = REPO / "paper" / "src" / "geosteer_paper"
    shipped = sorted((root / "reproduction" / "items").glob("*.json"))
    assert len(shipped) == 3
    for f in shipped:
        assert any(fnmatch.fnmatch(f.relative_to(root).as_posix(), g) for g in globs), f.name
