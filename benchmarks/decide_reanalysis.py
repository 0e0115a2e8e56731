"""``geosteer bench decide``'s committed results re-read by the decision rule in force, and its sensitivity.

The committed folder holds the tidy records, not the run's checkpoints, so ``--report-only`` cannot rebuild it;
this reads ``records.csv``, ``concepts.csv`` and ``units.csv`` back and writes ``results.json`` and ``verdict.txt``
through the report's own code (:func:`geosteer.bench.decide_report.write_results`), then recomputes the verdict
on subsets of the data: seed 0 alone, the promoted or the suppressed topics alone, either alternate half of the
concepts (sorted by name), and without each concept in turn. Each subset is a fresh Holm family. It also reads
the verdict off the BCa intervals reported beside the t intervals.

    .venv/bin/python benchmarks/decide_reanalysis.py --rewrite --sensitivity docs/results/decide/sensitivity.json

About 30 CPU-seconds.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from statistics import median

from geosteer.bench import endpoints as E
from geosteer.bench.decide_report import pairs, read_tables, write_results
from geosteer.bench.design import ALPHA, DECISION_LEVELS, EARLIER
from geosteer.bench.kl_match import level_key

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results" / "decide"


def subsets(recs: list[dict]) -> dict[str, list[dict]]:
    """name -> the admitted records of that subset."""
    admitted = [r for r in recs if r["admitted"]]
    names = sorted({r["concept"] for r in admitted})
    kind = {r["concept"]: r["kind"] for r in admitted}
    out = {"all": admitted, "seed 0 alone": [r for r in admitted if r["seed"] == 0]}
    for k in ("topic-promote", "topic-suppress"):
        out[f"{k} only"] = [r for r in admitted if kind[r["concept"]] == k]
    for half in (0, 1):
        keep = set(names[half::2])
        out[f"alternate half {'AB'[half]} ({', '.join(sorted(keep))})"] = [r for r in admitted if r["concept"] in keep]
    for c in names:
        out[f"without {c}"] = [r for r in admitted if r["concept"] != c]
    return out


def verdict(recs: list[dict], levels: list[str]) -> list[dict]:
    """Per pair: the word, and per endpoint and level the reading, mean and interval."""
    family = [p for p in pairs() if any(r["lever"] == p[0] for r in recs)]
    return E.verdicts(E.compare(recs, family, levels, ALPHA), family)


def bca_view(recs: list[dict], levels: list[str]) -> dict:
    """The verdict read off the BCa intervals instead of the t intervals (all the data): the readings that
    change, the words, and the BCa / t width ratio."""
    admitted = [r for r in recs if r["admitted"]]
    rows = [r for r in E.compare(admitted, pairs(), levels, ALPHA) if r["endpoint"] != "score" and r["bca"]]
    alt = [{**r, "lo": r["bca"][0], "hi": r["bca"][1]} for r in rows]
    for r in alt:
        r["reading"] = E.reading(r)
    changed = [f"{r['a']} vs {r['b']} {r['endpoint']} at {r['kl_level']}: {t['reading']} -> {r['reading']}"
               for r, t in zip(alt, rows, strict=True) if r["reading"] != t["reading"]]
    words = {f"{a} vs {b}": E.decide([r for r in alt if (r["a"], r["b"]) == (a, b)]) for a, b in pairs()}
    ratio = median((r["bca"][1] - r["bca"][0]) / (r["hi"] - r["lo"]) for r in rows)
    out = {"tested_intervals": len(rows), "readings_changed": changed, "words": words, "width_ratio_median": ratio}
    print(f"BCa: {len(changed)} of {len(rows)} readings change; words "
          f"{dict(Counter(words.values()))}; median width ratio {out['width_ratio_median']:.2f}", flush=True)
    return out


def sensitivity(recs: list[dict], levels: list[str]) -> dict:
    out = {}
    for name, rows in subsets(recs).items():
        v = verdict(rows, levels)
        out[name] = {"n_concepts": len({r["concept"] for r in rows}),
                     "words": Counter(x["decision"] for x in v),
                     "not_undecided": {f"{x['lever']} vs {x['versus']}": x["decision"] for x in v
                                       if x["decision"] != "undecided"},
                     "vs_stock_concept": {x["lever"]: {lv: x.get(f"concept_{lv}") for lv in levels}
                                          for x in v if x["versus"] == "stock"}}
        words = ", ".join(f"{k} {n}" for k, n in sorted(out[name]["words"].items()))
        gains = "; ".join(f"{lever} {' / '.join(c[lv]['reading'] for lv in levels if c[lv])}"
                          for lever, c in out[name]["vs_stock_concept"].items())
        print(f"{name} [{out[name]['n_concepts']} concepts]: {words}; concept vs stock: {gains}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--rewrite", action="store_true", help="write results.json and verdict.txt in --results")
    ap.add_argument("--sensitivity", type=Path, default=None, help="write the subsets' verdicts here (JSON)")
    args = ap.parse_args()
    recs, concepts, units = read_tables(args.results)
    levels = [level_key(t) for t in DECISION_LEVELS]
    if args.rewrite:
        doc = write_results(args.results, EARLIER, recs, concepts, units)
        print(doc["summary"], flush=True)
    if args.sensitivity is not None:
        doc = {"rule": "geosteer.bench.endpoints (concept-level t, Holm over claims, intersection-union over levels)",
               "subsets": sensitivity(recs, levels), "bca": bca_view(recs, levels)}
        args.sensitivity.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
