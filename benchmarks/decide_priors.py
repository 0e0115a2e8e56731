"""The variance components ``bench decide`` sizes its designs with, read off the committed run.

For every (lever, reference) pair of the verdict and both decision levels, the between-concept and within-concept
standard deviations of the paired concept-score difference (one-way random-effects ANOVA,
:func:`geosteer.bench.stats.variance_components`) over the admitted records of ``docs/results/decide``; the
design's priors (``prior_sd_concept``, ``prior_sd_item``) are their medians.

    .venv/bin/python benchmarks/decide_priors.py

A few CPU-seconds; no model.
"""

from __future__ import annotations

import json
from pathlib import Path
from statistics import median

from geosteer.bench.decide_report import pairs, read_tables
from geosteer.bench.design import DECISION_LEVELS
from geosteer.bench.kl_match import level_key
from geosteer.bench.stats import paired_differences, variance_components

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results" / "decide"


def components(folder: Path = RESULTS) -> dict:
    """Per pair and level (sd_concept, sd_item, concepts), and their medians."""
    recs, _, _ = read_tables(folder)
    admitted = [r for r in recs if r["admitted"]]
    rows = []
    for a, b in pairs():
        for lv in (level_key(x) for x in DECISION_LEVELS):
            diffs = paired_differences(admitted, a, b, lv, field="concept_score")
            if len(diffs) >= 2:
                sd_c, sd_i = variance_components(diffs)
                rows.append({"a": a, "b": b, "kl_level": lv, "sd_concept": sd_c, "sd_item": sd_i,
                             "concepts": len(diffs)})
    return {"rows": rows, "sd_concept": median(r["sd_concept"] for r in rows),
            "sd_item": median(r["sd_item"] for r in rows)}


if __name__ == "__main__":
    doc = components()
    print(json.dumps({k: round(v, 4) for k, v in doc.items() if k != "rows"}))
