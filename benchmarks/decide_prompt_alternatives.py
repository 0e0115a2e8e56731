"""A prompt-unit ``bench decide`` run read without the Holm family: per concept, KL level and lever, the concept
gain over stock with unadjusted 95 % t and BCa intervals and a Wilcoxon signed-rank p (scipy only).

    python benchmarks/decide_prompt_alternatives.py results/decide-instruct-0.5b
"""

from __future__ import annotations

import csv
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy import stats


def main(folder: str) -> None:
    scores: dict[tuple[str, str, str], dict[str, float]] = defaultdict(dict)
    with open(Path(folder) / "records.csv", newline="") as f:
        for r in csv.DictReader(f):
            scores[(r["concept"], r["kl_level"], r["lever"])][r["prompt"]] = float(r["concept_score"])
    for (concept, level, lever), by_prompt in sorted(scores.items()):
        if lever == "stock":
            continue
        stock = scores[(concept, level, "stock")]
        x = np.array([by_prompt[p] - stock[p] for p in sorted(set(by_prompt) & set(stock))])
        t = stats.ttest_1samp(x, 0).confidence_interval(0.95)
        b = stats.bootstrap((x,), np.mean, n_resamples=4000, method="BCa", random_state=0).confidence_interval
        w = stats.wilcoxon(x).pvalue if np.any(x) else 1.0
        print(f"{concept:8s} {level:5s} {lever:15s} n={len(x)} mean {x.mean():+.3f} t95 [{t.low:+.3f}, {t.high:+.3f}]"
              f" BCa95 [{b.low:+.3f}, {b.high:+.3f}] Wilcoxon p {w:.3f}")


if __name__ == "__main__":
    if len(sys.argv) != 2 or not (Path(sys.argv[1]) / "records.csv").is_file():
        print("error: give one RUN_FOLDER holding a bench decide records.csv", file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1])
