"""The verdict of a design whose unit is the test prompt (``--design instruct``), recomputed with numpy and scipy alone.

From the definition (docs/steering-decision.md, the instruct design's rule): per (concept, lever, reference,
endpoint, KL level), the paired differences per (seed, prompt) of the concept's admitted records, averaged per
prompt over its seeds; ``scipy.stats.ttest_1samp`` over those prompt means (against 0 for the concept, against
-margin for a cost) gives the mean, the standard error, the degrees of freedom, the two-sided p and the t interval;
per claim (concept, pair, tested endpoint) the larger p of the rule's levels, Holm over every claim made (all
concepts and pairs, ties in the order concept, pair, endpoint), each claim's intervals at alpha / (m - rank + 1);
the readings and the word per concept and pair. Used by ``decide_recompute.py`` when the report records the unit
"prompt"; nothing of geosteer is imported.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

NUMBERS = ("mean", "se", "df", "lo", "hi", "p", "p_claim", "p_holm", "alpha_ci", "n_prompts", "n_items")


def prompt_means(table: dict, a: str, b: str, level: str, endpoint: str, concept: str) -> tuple[np.ndarray, int]:
    """(the prompt means of d = A - B of ``concept``, sorted by prompt; the number of paired items)."""
    xa, xb = table.get((a, level), {}), table.get((b, level), {})
    per: dict[str, list[float]] = {}
    for key in sorted(k for k in xa.keys() & xb.keys() if k[0] == concept):
        d = xa[key][endpoint] - xb[key][endpoint]
        if not math.isnan(d):
            per.setdefault(key[2], []).append(d)
    return np.array([np.mean(per[p]) for p in sorted(per)]), sum(len(v) for v in per.values())


def ttest(values: np.ndarray, alpha: float, null: float) -> dict:
    """scipy's one-sample t test of the prompt means against ``null`` and its interval at 1 - alpha (>= 2 values)."""
    n = values.size
    out = {"mean": float(values.mean()) if n else None, "se": None, "df": n - 1 if n else None, "lo": None,
           "hi": None, "p": None}
    if n < 2:
        return out
    res = stats.ttest_1samp(values, popmean=null)
    se = float(stats.sem(values))
    if se == 0:  # no spread: scipy gives nan; the rule's p is 0 off the null, 1 on it, the interval a point
        return {**out, "se": 0.0, "lo": out["mean"], "hi": out["mean"], "p": 0.0 if out["mean"] != null else 1.0}
    ci = res.confidence_interval(confidence_level=1 - alpha)
    return {**out, "se": se, "lo": float(ci.low), "hi": float(ci.high), "p": float(res.pvalue)}


def recompute(table: dict, pairs: list[tuple[str, str]], levels: list[str], tested: tuple[str, ...],
              margin: dict, alpha: float, reading, word) -> dict:
    """Every row, the word per (concept, pair) and the Holm family's size (module docstring); ``reading`` and
    ``word`` are decide_recompute's."""
    concepts = sorted({k[0] for cell in table.values() for k in cell})
    rows, claims = [], {}
    for c in concepts:
        for a, b in pairs:
            for ep in (*tested, "score"):
                null = -margin[ep] if ep in ("fluency", "relevance") else 0.0
                mine = []
                for lv in levels:
                    values, n_items = prompt_means(table, a, b, lv, ep, c)
                    mine.append({"concept": c, "a": a, "b": b, "endpoint": ep, "kl_level": lv,
                                 "n_prompts": int(values.size), "n_items": n_items, **ttest(values, alpha, null),
                                 "alpha_ci": alpha, "p_claim": None, "p_holm": None, "_values": values,
                                 "_null": null})
                rows += mine
                if ep in tested and all(r["p"] is not None for r in mine):
                    claims[(c, a, b, ep)] = mine
                elif ep in tested:
                    for r in mine:
                        r.update(lo=None, hi=None)
    order = sorted(claims, key=lambda k: (max(r["p"] for r in claims[k]), list(claims).index(k)))
    m, running = len(order), 0.0
    for rank, key in enumerate(order, start=1):
        p_claim, level = max(r["p"] for r in claims[key]), alpha / (m - rank + 1)
        running = max(running, min(1.0, (m - rank + 1) * p_claim))
        for r in claims[key]:
            t = ttest(r["_values"], level, r["_null"])
            r.update(lo=t["lo"], hi=t["hi"], alpha_ci=level, p_claim=p_claim, p_holm=running)
    for r in rows:
        r["reading"] = reading(r["endpoint"], r["lo"], r["hi"])
    words = {(c, a, b): word([r for r in rows if (r["concept"], r["a"], r["b"]) == (c, a, b)])
             for c in concepts for a, b in pairs}
    return {"rows": rows, "words": words, "claims": m, "stepdown_differs": []}


def check(mine: dict, endpoints: list[dict], verdicts: list[dict], rtol: float, close, where: str = "") -> tuple:
    """(mismatches as lines, values compared) between the recomputation and a prompt-unit report."""
    theirs = {(r.get("concept"), r["a"], r["b"], r["endpoint"], str(r["kl_level"])): r for r in endpoints}
    bad, n = [], 0
    for r in mine["rows"]:
        key = (r["concept"], r["a"], r["b"], r["endpoint"], r["kl_level"])
        t = theirs.pop(key, None)
        if t is None:
            bad.append(f"{where}{' '.join(key)}: not in the report")
            continue
        for k in (*NUMBERS, "reading"):
            if k in t:
                n += 1
                if not (t[k] == r[k] if k == "reading" else close(r[k], t[k], rtol)):
                    bad.append(f"{where}{' '.join(key)} {k}: recomputed {r[k]!r}, report {t[k]!r}")
    bad += [f"{where}{' '.join(map(str, k))}: in the report only" for k in theirs]
    words = {(v.get("concept"), v["lever"], v["versus"]): v["decision"] for v in verdicts}
    for key, w in mine["words"].items():
        n += 1
        got = words.pop(key, "no word")
        if got != w:
            bad.append(f"{where}{key[0]}: {key[1]} vs {key[2]}: recomputed {w}, report {got}")
    return bad + [f"{where}{k}: a word in the report only" for k in words], n


def markdown(folder: str, main: dict, bad: list[str], n: int) -> str:
    """The recomputed words per concept and pair, the ones not undecided listed."""
    decided = [f"{c}: {a} vs {b} {w}" for (c, a, b), w in main["words"].items() if w != "undecided"]
    return (f"Recomputed from {folder} (numpy and scipy, not the report's code; the unit is the test prompt): {n} "
            f"values compared with results.json, {len(bad)} mismatches; Holm over {main['claims']} claims "
            f"(concepts x pairs x tested endpoints).\n\nNot undecided: {'; '.join(decided) or 'none'}.\n")
