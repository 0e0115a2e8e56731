"""The files lm-evaluation-harness writes under an ``--output_path`` folder, as the task tables read them.

lm-eval names them ``results_<timestamp>.json`` and ``samples_<task>_<timestamp>.jsonl`` (in a folder per
model), so the last in sorted order is the newest run's.
"""

from __future__ import annotations

from pathlib import Path

from geosteer.errors import GeosteerError
from geosteer.io_utils import read_json


def newest_file(run: str | Path, pattern: str) -> Path | None:
    """The newest file named like ``pattern`` anywhere under the folder ``run``, or None when there is none."""
    files = sorted(Path(run).rglob(pattern))
    return files[-1] if files else None


def newest_results(run: str | Path) -> dict | None:
    """The newest aggregated results object (``results_*.json``) under ``run``, or None when there is none."""
    f = newest_file(run, "results_*.json")
    if f is None:
        return None
    doc = read_json(f, "lm-eval results file")
    if not isinstance(doc, dict):
        raise GeosteerError(f"lm-eval results file {f} is not a JSON object")
    return doc
