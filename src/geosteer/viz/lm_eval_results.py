"""lm-evaluation-harness ``results_*.json`` files as tidy rows: one row per task and filter.

lm-eval keys its scores as ``"<metric>,<filter>"`` (``"acc,none"``, ``"acc_stderr,none"``); a row here is
``{"task", "filter", "<metric>": value, "<metric>_stderr": stderr, "n": samples}``. The run's model,
``model_args``, limit and lm-eval version go into ``meta``.
"""

from __future__ import annotations

import json


def is_lm_eval_results(obj) -> bool:
    """True for the aggregated results file that lm-eval's ``--output_path`` writes."""
    return (isinstance(obj, dict) and isinstance(obj.get("results"), dict) and isinstance(obj.get("config"), dict)
            and all(isinstance(v, dict) for v in obj["results"].values()))


def _number(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def lm_eval_rows(obj: dict) -> tuple[dict, list[dict]]:
    """``(meta, rows)`` of an lm-eval results object (see the module docstring)."""
    cfg = obj.get("config") or {}
    args = cfg.get("model_args")
    meta = {"kind": "lm-eval results", "model": cfg.get("model"),
            "model_args": args if isinstance(args, str) else json.dumps(args, sort_keys=True),
            "limit": cfg.get("limit"), "lm_eval_version": obj.get("lm_eval_version"),
            "title": f"lm-eval: {cfg.get('model')} ({obj.get('model_name') or ''})"}
    samples = obj.get("n-samples")
    samples = samples if isinstance(samples, dict) else {}  # lm-eval writes {task: {"effective": n, ...}}
    rows: list[dict] = []
    for task, scores in obj["results"].items():
        by_filter: dict[str, dict] = {}
        for key, value in scores.items():
            metric, sep, filt = key.partition(",")
            v = _number(value)
            if not sep or v is None:
                continue
            row = by_filter.setdefault(filt, {"task": task, "filter": filt})
            row[metric] = v
        entry = samples.get(task)
        n = entry.get("effective") if isinstance(entry, dict) else None
        for row in by_filter.values():
            if isinstance(n, int) and not isinstance(n, bool):
                row["n"] = n
            rows.append(row)
    return meta, rows
