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
    doc = json.loads(ap.parse_args().results.read_text())
    print(markdown_table(doc["rows"]))
    print()
    print(pivot_table(doc["rows"]))
    print()
    print(concept_table(doc["rows"]))


if __name__ == "__main__":
    main()
