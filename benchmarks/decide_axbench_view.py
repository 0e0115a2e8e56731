"""AxBench's own protocol over ``geosteer bench decide``'s committed per-prompt records: no new model runs.

For each lever and (concept, seed), the control-KL level with the best mean score on one half of the test prompts
(a seeded split) is chosen and its score on the other half is reported, paired with the stock model's, with
concept-level t intervals (:mod:`geosteer.bench.axbench_view`, the same code a run's report uses). The committed
folder holds the tidy records, not the run's checkpoints, so this reads ``records.csv`` back
(:func:`geosteer.bench.decide_report.read_tables`) and writes ``axbench_view.json`` and ``axbench_view.csv`` beside it.

    .venv/bin/python benchmarks/decide_axbench_view.py --split-seed 0

Under a CPU-second.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from geosteer.bench import axbench_view as A
from geosteer.bench.decide_report import LEVERS, read_tables
from geosteer.bench.design import EARLIER, EXPLORATORY
from geosteer.bench.kl_match import level_key

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results" / "decide"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--split-seed", type=int, default=A.SPLIT_SEED)
    args = ap.parse_args()
    recs, _, _ = read_tables(args.results)
    levels = [level_key(t) for t in EARLIER.kl_levels]  # the committed run's levels
    levers = [*LEVERS, *(x for x in EXPLORATORY if any(r["lever"] == x for r in recs))]
    doc = A.view(recs, levels, levers, seed=args.split_seed)
    (args.results / "axbench_view.json").write_text(json.dumps({k: v for k, v in doc.items() if k != "choices"},
                                                               indent=1) + "\n", encoding="utf-8")
    with open(args.results / A.CSV_NAME, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, list(doc["choices"][0]))
        w.writeheader()
        w.writerows(doc["choices"])
    print(A.markdown(doc), flush=True)


if __name__ == "__main__":
    main()
