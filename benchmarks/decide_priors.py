"""The variance components ``bench decide`` sizes its designs with, read off the committed run.

For every (lever, reference) pair of the verdict and both decision levels, the between-concept and within-concept
standard deviations of the paired concept-score difference (one-way random-effects ANOVA,
:func:`geosteer.bench.stats.variance_components`) over the admitted records of ``docs/results/decide``; the
design's priors (``prior_sd_concept``, ``prior_sd_item``) are their medians. For the designs whose unit is the test
prompt (``--design instruct``), the same records split the within-concept spread in two: between the prompts of
a concept (``sd_prompt``) and between the seeds of one prompt (``sd_seed``: each seed retrains the levers and the
judge on redrawn texts), the medians of :func:`prompt_components`.

    .venv/bin/python benchmarks/decide_priors.py

A few CPU-seconds; no model.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from statistics import median

import numpy as np

from geosteer.bench.decide_report import pairs, read_tables
from geosteer.bench.design import DECISION_LEVELS
from geosteer.bench.kl_match import level_key
from geosteer.bench.stats import paired_clusters, paired_differences, variance_components

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


def _split(groups_by_concept: dict) -> tuple[float, float] | None:
    """(sd_prompt, sd_seed) of d_cps = mu_c + a_cp + e_cps by the method of moments, pooled over concepts: sd_seed^2
    the pooled within-prompt variance, sd_prompt^2 = max(0, V - sd_seed^2 / S) with V the pooled within-concept
    variance of the prompt means and S the seeds per prompt (only prompts read at every seed count)."""
    ssw = dfw = ssb = dfb = 0.0
    per = max((g.size for groups in groups_by_concept.values() for g in groups), default=0)
    for groups in groups_by_concept.values():
        full = [g for g in groups if g.size == per]
        if per < 2 or len(full) < 2:
            continue
        x = np.array(full)
        ssw += float(((x - x.mean(axis=1, keepdims=True)) ** 2).sum())
        dfw += x.shape[0] * (per - 1)
        m = x.mean(axis=1)
        ssb += float(((m - m.mean()) ** 2).sum())
        dfb += m.size - 1
    if not dfw or not dfb:
        return None
    seed_var = ssw / dfw
    return math.sqrt(max(0.0, ssb / dfb - seed_var / per)), math.sqrt(seed_var)


def prompt_components(folder: Path = RESULTS) -> dict:
    """Per pair and level (sd_prompt, sd_seed), and their medians (module docstring)."""
    recs, _, _ = read_tables(folder)
    admitted = [r for r in recs if r["admitted"]]
    rows = []
    for a, b in pairs():
        for lv in (level_key(x) for x in DECISION_LEVELS):
            got = _split(paired_clusters(admitted, a, b, lv, field="concept_score"))
            if got is not None:
                rows.append({"a": a, "b": b, "kl_level": lv, "sd_prompt": got[0], "sd_seed": got[1]})
    return {"rows": rows, "sd_prompt": median(r["sd_prompt"] for r in rows),
            "sd_seed": median(r["sd_seed"] for r in rows)}


if __name__ == "__main__":
    doc = {**components(), **prompt_components()}
    print(json.dumps({k: round(v, 4) for k, v in doc.items() if k != "rows"}))
