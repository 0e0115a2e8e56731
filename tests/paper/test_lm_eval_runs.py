"""geosteer_paper.lm_eval_runs and the task tables that read lm-eval output folders through it."""

import json
import subprocess
import sys
from pathlib import Path

from geosteer_paper.lm_eval_runs import newest_file, newest_results

ROOT = Path(__file__).resolve().parents[2]


def _results(folder: Path, stamp: str, score: float) -> None:
    """One lm-eval results file as ``--output_path`` lays it out (a folder per model)."""
    d = folder / "__model__"
    d.mkdir(parents=True, exist_ok=True)
    doc = {"results": {"geosteer_ruler_niah": {"score,none": score, "score_stderr,none": 0.1}},
           "n-samples": {"geosteer_ruler_niah": {"effective": 5}}, "config": {"model_args": "pretrained=m"}}
    (d / f"results_{stamp}.json").write_text(json.dumps(doc))


def test_the_newest_file_is_the_last_timestamp(tmp_path):
    _results(tmp_path / "run", "2026-01-02T10-00-00", 0.2)
    _results(tmp_path / "run", "2026-01-10T09-00-00", 0.6)
    _results(tmp_path / "run", "2026-01-03T23-59-59", 0.4)
    assert newest_file(tmp_path / "run", "results_*.json").name == "results_2026-01-10T09-00-00.json"
    assert newest_results(str(tmp_path / "run"))["results"]["geosteer_ruler_niah"]["score,none"] == 0.6


def test_a_folder_without_the_file_gives_none(tmp_path):
    (tmp_path / "empty" / "m").mkdir(parents=True)
    (tmp_path / "empty" / "m" / "samples_t_2026.jsonl").write_text("")
    assert newest_results(tmp_path / "empty") is None
    assert newest_file(tmp_path / "empty", "samples_other_*.jsonl") is None
    assert newest_file(tmp_path / "empty", "samples_t_*.jsonl").name == "samples_t_2026.jsonl"


def test_ruler_tidy_reads_each_runs_newest_results_and_skips_empty_runs(tmp_path):
    _results(tmp_path / "base", "2026-01-01T00-00-00", 0.1)
    _results(tmp_path / "base", "2026-02-01T00-00-00", 0.5)
    _results(tmp_path / "steered", "2026-01-01T00-00-00", 0.3)
    (tmp_path / "nothing").mkdir()
    out = tmp_path / "ruler.json"
    p = subprocess.run([sys.executable, str(ROOT / "paper/studies/tasks/ruler_tidy.py"), str(tmp_path / "base"),
                        f"edit={tmp_path / 'steered'}", str(tmp_path / "nothing"), "--out", str(out)],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert [(r["setting"], r["score"]) for r in doc["rows"]] == [("base", 0.5), ("edit", 0.3)]
    assert doc["mean"] == {"base": 0.5, "edit": 0.3} and doc["common_tasks"] == ["geosteer_ruler_niah"]


def test_table1_tidy_reads_each_runs_newest_results(tmp_path):
    _results(tmp_path / "stock", "2026-01-01T00-00-00", 0.25)
    _results(tmp_path / "stock", "2026-03-01T00-00-00", 0.75)
    out = tmp_path / "table1.json"
    p = subprocess.run([sys.executable, str(ROOT / "paper/studies/tasks/table1_tidy.py"), str(tmp_path / "stock"),
                        "--out", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    rows = json.loads(out.read_text())
    assert [(r["setting"], r["metric"], r["value"], r["stderr"], r["n"]) for r in rows] == [
        ("stock", "score", 0.75, 0.1, 5)]
