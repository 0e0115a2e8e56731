"""Print the markdown tables of steering-benchmark results files (summary per lever, score per concept, every row).

    python paper/studies/bench/table.py docs/results/bench/smollm2-small/results.json
    python paper/studies/bench/table.py docs/results/bench/smollm2-small/results.json \
        docs/results/bench/smollm2-small-variants/results.json --concepts-of 2   # two runs, same settings

Several files are read as one run (a (concept, lever) row that two files hold is taken from the first);
``--concepts-of N`` keeps the concepts the N-th file measured; ``--versus A,B`` prints lever A against lever B
(the mean per-concept score difference with its bootstrap interval over concepts, and where A is ahead).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from geosteer.bench.results import concept_table, markdown_table, paired_difference, pivot_table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, nargs="+")
    ap.add_argument("--concepts-of", type=int, default=0, help="keep the concepts the N-th file (1-based) holds")
    ap.add_argument("--complete", action="store_true", help="the summary over the concepts every lever finished")
    ap.add_argument("--versus", action="append", default=[], metavar="A,B",
                    help="lever A against lever B: mean score difference over concepts, 95 %% interval, wins")
    args = ap.parse_args()
    docs = [json.loads(p.read_text()) for p in args.results]
    seen, rows = set(), []
    for d in docs:
        for r in d["rows"]:
            if (r["concept"], r["lever"]) not in seen:
                seen.add((r["concept"], r["lever"]))
                rows.append(r)
    if args.concepts_of:
        keep = {r["concept"] for r in docs[args.concepts_of - 1]["rows"]}
        rows = [r for r in rows if r["concept"] in keep]
    doc = {"rows": rows, "meta": {"levers": [lv for d in docs for lv in d["meta"]["levers"]]}}
    if args.complete:
        done = {c for c in {r["concept"] for r in rows}
                if set(doc["meta"]["levers"]) <= {r["lever"] for r in rows if r["concept"] == c}}
        rows = [r for r in rows if r["concept"] in done]
    print(markdown_table(rows))
    print()
    print(pivot_table(rows))
    print()
    print(concept_table(rows))
    for pair in args.versus:
        a, b = pair.split(",")
        d = paired_difference(rows, a, b)
        m = d["difference"]
        print(f"\n{a} - {b} over {d['concepts']} concepts: {m['mean']:+.4f} (95 % CI {m['lo']:+.4f} … "
              f"{m['hi']:+.4f}, bootstrap over concepts); {a} ahead on {len(d['wins'])} ({', '.join(d['wins'])}), "
              f"behind on {len(d['losses'])} ({', '.join(d['losses'])}), equal on {len(d['ties'])}")


if __name__ == "__main__":
    main()
