"""Does ``geosteer bench decide``'s earlier score rule hang on the bootstrap's random seed?

The earlier rule (AxBench's score alone, a hierarchical bootstrap; ``earlier_rule`` in ``results.json``,
superseded by the concept-level t rule, which has no random seed) is computed at bootstrap seed 0. This study
recomputes every comparison from the committed per-prompt records (``docs/results/decide/records.csv``) at seeds
0-5, checks that seed 0 gives the committed earlier verdict, and writes each seed's decisions and intervals.

    .venv/bin/python benchmarks/decide_bootstrap_seeds.py --out docs/results/decide/bootstrap_seeds.json

20,000 replicates a comparison, as the benchmark; about 2 CPU-s a seed.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from geosteer.bench.decide_report import N_BOOT, verdicts
from geosteer.bench.design import ALPHA, DECISION_LEVELS, EQUIVALENCE_MARGIN
from geosteer.bench.kl_match import level_key

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results" / "decide"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    with open(args.results / "records.csv", newline="", encoding="utf-8") as f:
        records = [r for r in csv.DictReader(f) if r["admitted"] == "True"]
    earlier = json.loads((args.results / "results.json").read_text(encoding="utf-8"))["earlier_rule"]
    committed = {(v["lever"], v["versus"]): v["decision"] for v in earlier["verdicts"]}
    by_seed = {}
    for seed in range(args.seeds):
        rows = verdicts(records, [level_key(t) for t in DECISION_LEVELS], EQUIVALENCE_MARGIN, ALPHA, seed=seed)[1]
        by_seed[str(seed)] = rows
        moved = [f"{v['lever']} vs {v['versus']}: {v['decision']}" for v in rows
                 if v["decision"] != committed[(v["lever"], v["versus"])]]
        if seed == 0 and moved:
            raise SystemExit(f"seed 0 does not reproduce the committed verdict: {moved}")
        print(f"seed {seed}: " + ("as committed" if not moved else "; ".join(moved)), flush=True)
    args.out.write_text(json.dumps({"n_boot": N_BOOT, "committed": {f"{a} vs {b}": d for (a, b), d in
                                                                     committed.items()},
                                    "by_seed": by_seed}, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
