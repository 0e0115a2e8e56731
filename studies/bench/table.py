"""Print the markdown tables of a steering-benchmark results file (summary per lever, score per concept, every row).

    python studies/bench/table.py docs/results/bench/smollm2-small/results.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from geosteer.bench.results import concept_table, markdown_table, pivot_table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--complete", action="store_true", help="the summary over the concepts every lever finished")
    args = ap.parse_args()
    doc = json.loads(args.results.read_text())
    rows = doc["rows"]
    if args.complete:
        done = {c for c in {r["concept"] for r in rows}
                if set(doc["meta"]["levers"]) <= {r["lever"] for r in rows if r["concept"] == c}}
        rows = [r for r in rows if r["concept"] in done]
    print(markdown_table(rows))
    print()
    print(pivot_table(doc["rows"]))
    print()
    print(concept_table(doc["rows"]))


if __name__ == "__main__":
    main()
