"""AxBench's own protocol as a second view of a ``bench decide`` run: the strength chosen on held-out prompts.

The decision rule compares levers at matched control KL. AxBench instead chooses each concept's steering strength
where its score is best on held-out instructions and reports the score at that strength on the others. This view
does the same over the run's own records, with no new model runs:

- each concept's test prompts are split in two halves by a seeded hash (:func:`split_prompts`: sorted by SHA-256
  of (seed, concept, prompt) and dealt alternately; the first half chooses, the second reports);
- for each lever and (concept, seed), the chosen setting is the control-KL level (the run's frontier: each level is
  one strength of the lever) whose mean **score** (AxBench's harmonic mean of concept, instruction relevance and
  fluency, :mod:`geosteer.bench.decide_score`) over the choosing half is highest (a tie: the lower level);
- the lever's value is its score at that level on the reporting half, paired item by item with the stock model's
  score on the same (seed, prompt), averaged per concept, with the endpoints' concept-level t interval
  (:func:`geosteer.bench.tdist.concept_t`); descriptive, no Holm family, no word.

Only admitted concepts enter, as in the verdict. Prompting and walls have one setting (the same records at every
level): their choice changes nothing. A number on the reporting half never moves a choice.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import numpy as np

from geosteer.bench.tdist import concept_t

SPLIT_SEED = 0
FIELD = "score"
CSV_NAME = "axbench_view.csv"


def split_prompts(concept: str, prompts: Sequence[str], seed: int = SPLIT_SEED) -> tuple[list[str], list[str]]:
    """(choosing half, reporting half) of a concept's prompts: sorted by SHA-256 of (seed, concept, prompt), dealt
    alternately (the choosing half has the odd one out); independent of the prompts' order."""
    def key(p: str) -> str:
        return hashlib.sha256(f"{seed}\0{concept}\0{p}".encode()).hexdigest()
    ordered = sorted(dict.fromkeys(prompts), key=key)
    return ordered[0::2], ordered[1::2]


def _value(r: dict) -> float:
    v = r.get(FIELD)
    return math.nan if v is None or v == "" else float(v)


def _mean(xs: list[float]) -> float | None:
    xs = [x for x in xs if not math.isnan(x)]
    return float(np.mean(xs)) if xs else None


def _tables(recs: Sequence[dict]) -> tuple[dict, dict, dict]:
    """(scores, stock, prompts): {(lever, concept, seed, level): {prompt: score}}, {(concept, seed): {prompt:
    score}} of the stock model, {concept: prompts} of the admitted records."""
    scores: dict = {}
    stock: dict = {}
    prompts: dict[str, list[str]] = {}
    for r in recs:
        if not r.get("admitted"):
            continue
        c, s, p = str(r["concept"]), int(r["seed"]), str(r["prompt"])
        prompts.setdefault(c, []).append(p)
        if r["lever"] == "stock":
            stock.setdefault((c, s), {})[p] = _value(r)  # the same records stand at every level
        else:
            scores.setdefault((r["lever"], c, s, str(r["kl_level"])), {})[p] = _value(r)
    return scores, stock, prompts


def choose(by_level: dict[str, dict[str, float]], levels: Sequence[str], half: Sequence[str]) -> str | None:
    """The level whose mean score over the prompts ``half`` is highest (a tie: the earlier of ``levels``); None when
    no level has a reading there. ``by_level``: level -> {prompt: score}."""
    best, best_mean = None, -math.inf
    for lv in levels:
        m = _mean([by_level[lv].get(p, math.nan) for p in half]) if lv in by_level else None
        if m is not None and m > best_mean:
            best, best_mean = lv, m
    return best


def choices(recs: Sequence[dict], levels: Sequence[str], seed: int = SPLIT_SEED) -> list[dict]:
    """One row per (lever, concept, seed): the level chosen on the choosing half, its mean score there, its mean
    score on the reporting half and the stock model's on the same prompts, and the paired differences there."""
    scores, stock, prompts = _tables(recs)
    units = sorted({(lever, c, s) for lever, c, s, _ in scores})
    out = []
    for lever, c, s in units:
        pick, report = split_prompts(c, prompts[c], seed)
        by_level = {lv: scores[(lever, c, s, lv)] for lv in levels if (lever, c, s, lv) in scores}
        lv = choose(by_level, levels, pick)
        if lv is None or (c, s) not in stock:
            continue
        mine, ref = by_level[lv], stock[(c, s)]
        pairs = [(mine[p], ref[p]) for p in report if p in mine and p in ref
                 and not (math.isnan(mine[p]) or math.isnan(ref[p]))]
        out.append({"lever": lever, "concept": c, "seed": s, "kl_level": lv,
                    "choosing_score": _mean([by_level[lv].get(p, math.nan) for p in pick]),
                    "score": _mean([a for a, _ in pairs]), "stock_score": _mean([b for _, b in pairs]),
                    "n_choosing": len(pick), "n_reporting": len(pairs),
                    "differences": [a - b for a, b in pairs]})
    return out


def view(recs: Sequence[dict], levels: Sequence[str], levers: Sequence[str] | None = None,
         seed: int = SPLIT_SEED, alpha: float = 0.05) -> dict:
    """The view (module docstring): ``levers`` (one row per lever: its score and the stock model's on the reporting
    half, their difference with its concept-level t interval, how often each level was chosen) and ``choices``
    (:func:`choices`, without the per-item differences)."""
    rows = choices(recs, levels, seed)
    names = list(levers) if levers is not None else list(dict.fromkeys(r["lever"] for r in rows))
    summary = []
    for lever in names:
        mine = [r for r in rows if r["lever"] == lever and r["differences"]]
        if not mine:
            continue
        diffs: dict[str, list[float]] = {}
        for r in mine:
            diffs.setdefault(r["concept"], []).extend(r["differences"])
        t = concept_t({c: np.asarray(d) for c, d in diffs.items()}, alpha)
        per = {c: (np.mean([r["score"] for r in mine if r["concept"] == c]),
                   np.mean([r["stock_score"] for r in mine if r["concept"] == c])) for c in diffs}
        summary.append({"lever": lever, "score": float(np.mean([a for a, _ in per.values()])),
                        "stock_score": float(np.mean([b for _, b in per.values()])),
                        **{k: t[k] for k in ("mean", "lo", "hi", "p", "n_concepts", "n_items")},
                        "chosen": {lv: sum(r["kl_level"] == lv for r in mine) for lv in levels}})
    return {"what": "AxBench's protocol: per lever and (concept, seed) the control-KL level with the best mean "
                    "score on half of the test prompts (seeded split), its score on the other half, paired with "
                    "stock; concept-level t intervals; descriptive",
            "split_seed": seed, "alpha": alpha, "levels": list(levels), "levers": summary,
            "choices": [{k: v for k, v in r.items() if k != "differences"} for r in rows]}


def markdown(doc: dict) -> str:
    """One row per lever: its score on the reporting half, the stock model's, the difference [95 % t interval] and
    the levels chosen."""
    if not doc.get("levers"):
        return ""
    lines = [f"AxBench's protocol (strength chosen per concept and seed on half of the test prompts, split seed "
             f"{doc['split_seed']}; score on the other half; paired with stock, 95 % concept-level t; descriptive, "
             "not the verdict: stock sits at the ceiling of the score's capped relevance and fluency, so a lever "
             "that does not move the concept scores below it by default):",
             "", "| lever | score | stock | difference | levels chosen |", "|---|---|---|---|---|"]
    for r in doc["levers"]:
        ci = "" if r["lo"] is None else f" [{r['lo']:+.3f}, {r['hi']:+.3f}]"
        chosen = ", ".join(f"{lv}: {n}" for lv, n in r["chosen"].items() if n)
        lines.append(f"| {r['lever']} | {r['score']:.3f} | {r['stock_score']:.3f} | {r['mean']:+.3f}{ci} | "
                     f"{chosen} |")
    return "\n".join(lines) + "\n"
