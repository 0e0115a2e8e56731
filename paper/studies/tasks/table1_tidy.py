"""Tidy the lm_eval result files of the Table-1 proxy runs into one JSON + a markdown table.

Usage: python paper/studies/tasks/table1_tidy.py RUN_DIR [RUN_DIR ...] --out docs/results/tasks/table1_proxy.json
(each RUN_DIR is an lm_eval --output_path; its name is the setting).
"""

import argparse
import json
from pathlib import Path

from geosteer_paper.lm_eval_runs import newest_results


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("runs", nargs="+")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    rows = []
    for run in a.runs:
        doc = newest_results(run)
        if doc is None:
            continue
        for task, res in sorted(doc["results"].items()):
            for k, v in res.items():
                if k.endswith(",none") and not k.split(",")[0].endswith("stderr") and isinstance(v, float):
                    rows.append({"setting": Path(run).name, "task": task, "metric": k.split(",")[0],
                                 "value": v, "stderr": res.get(k.replace(",", "_stderr,"), None),
                                 "n": doc["n-samples"][task]["effective"],
                                 "model_args": doc["config"]["model_args"]})
    Path(a.out).write_text(json.dumps(rows, indent=1) + "\n")
    tasks = sorted({(r["task"], r["metric"]) for r in rows})
    print("| setting | " + " | ".join(f"{t.replace('geosteer_', '')} {m}" for t, m in tasks) + " |")
    print("|---" * (len(tasks) + 1) + "|")
    for s in dict.fromkeys(r["setting"] for r in rows):
        vals = {(r["task"], r["metric"]): r for r in rows if r["setting"] == s}
        cells = [f"{100 * vals[k]['value']:.1f} ± {100 * (vals[k]['stderr'] or 0):.1f}" if k in vals else "—"
                 for k in tasks]
        print(f"| {s} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
