"""Tidy the lm_eval result files of the RULER-style runs into one JSON + a markdown table (tasks as rows).

Usage: python paper/studies/tasks/ruler_tidy.py RUN_DIR [RUN_DIR ...] --out docs/results/tasks/ruler_1024.json
(each RUN_DIR is an lm_eval --output_path; its name is the setting, or give SETTING=RUN_DIR to merge
several runs of one setting over different tasks). The mean rows are unweighted means of
the per-task scores (every task has the same n here): over each setting's own tasks, and over the tasks
all settings ran; ``stderr_mean`` is the standard error of the first (the tasks' errors in quadrature / n_tasks).
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
    for arg in a.runs:
        setting, _, run = arg.rpartition("=")
        setting = setting or Path(run).name
        doc = newest_results(run)
        if doc is None:
            continue
        for task, res in sorted(doc["results"].items()):
            if "score,none" in res:
                rows.append({"setting": setting, "task": task, "score": res["score,none"],
                             "stderr": res.get("score_stderr,none"), "n": doc["n-samples"][task]["effective"],
                             "model_args": doc["config"]["model_args"]})
    settings = list(dict.fromkeys(r["setting"] for r in rows))
    means = {s: [r["score"] for r in rows if r["setting"] == s] for s in settings}
    common = set.intersection(*({r["task"] for r in rows if r["setting"] == s} for s in settings))
    common_means = {s: sum(r["score"] for r in rows if r["setting"] == s and r["task"] in common) / len(common)
                    for s in settings}
    # standard error of each setting's mean over its own tasks: the tasks' errors in quadrature / n_tasks
    ses = {s: [r["stderr"] for r in rows if r["setting"] == s] for s in settings}
    out = {"rows": rows, "mean": {s: sum(v) / len(v) for s, v in means.items()},
           "stderr_mean": {s: (sum(e * e for e in v) ** 0.5 / len(v) if None not in v else None)
                           for s, v in ses.items()},
           "n_tasks": {s: len(v) for s, v in means.items()},
           "common_tasks": sorted(common), "mean_common_tasks": common_means}
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print("| task | " + " | ".join(settings) + " |")
    print("|---" * (len(settings) + 1) + "|")
    for task in sorted({r["task"] for r in rows}):
        vals = {r["setting"]: r for r in rows if r["task"] == task}
        cells = [f"{100 * vals[s]['score']:.0f} (n = {vals[s]['n']})" if s in vals else "—" for s in settings]
        print(f"| {task.replace('geosteer_ruler_', '')} | " + " | ".join(cells) + " |")
    print("| **mean, own tasks** | " + " | ".join(f"**{100 * out['mean'][s]:.1f}**" for s in settings) + " |")
    print(f"| **mean, the {len(common)} common tasks** | "
          + " | ".join(f"**{100 * common_means[s]:.1f}**" for s in settings) + " |")


if __name__ == "__main__":
    main()
