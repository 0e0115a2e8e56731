"""geosteer_paper.dynamics.studies.common.write_summary: the summary table first, then the others in order; the
summary shown (with the meta under --json)."""

import json

import geosteer.cli  # noqa: F401 - first, as the command loads it: it builds the study commands, this module's users
from geosteer_paper.dynamics.studies.common import write_summary

SUMMARY = [{"layer": 0, "kl": 0.5}, {"layer": 1, "kl": 0.25}]
TABLES = {"edits": [{"layer": 0, "seed": 3}], "fits": [{"layer": 1, "r2": 0.9}, {"layer": 0, "r2": 0.8}]}


def test_one_tidy_file_summary_first_then_each_table(tmp_path, capsys):
    out = tmp_path / "r.json"
    write_summary(SUMMARY, TABLES, {"model": "m"}, out, tmp_path / "r", True, "t")
    doc = json.loads(out.read_text())
    assert doc["meta"] == {"model": "m"}
    assert [(r["table"], r["layer"]) for r in doc["rows"]] == [("summary", 0), ("summary", 1), ("edits", 0),
                                                               ("fits", 1), ("fits", 0)]
    assert (tmp_path / "r.csv").read_text().startswith("table,")
    shown = json.loads(capsys.readouterr().out)
    assert shown == {"meta": {"model": "m"}, "summary": SUMMARY}


def test_without_files_only_the_summary_table_is_shown(tmp_path, capsys):
    write_summary(SUMMARY, TABLES, {"model": "m"}, None, None, False, "locality")
    text = capsys.readouterr().out
    assert "locality" in text and "0.25" in text and "seed" not in text and "r2" not in text
    assert not list(tmp_path.iterdir())
