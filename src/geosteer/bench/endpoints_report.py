"""The decision rule's tables (:mod:`geosteer.bench.endpoints`): the verdict per lever, every interval, the MDEs."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from geosteer.bench.endpoints import CONCEPT_MARGIN, FLUENCY_MARGIN, POWER, RELEVANCE_MARGIN, TESTED, n_claims
from geosteer.bench.stats import minimum_detectable_effect


def _f(x, d: int = 3) -> str:
    return "–" if x is None else f"{x:+.{d}f}"


def _u(x, d: int = 3) -> str:
    return "–" if x is None else f"{x:.{d}f}"


def _cell(v: dict, key: str, interval: bool = True) -> str:
    x = v.get(key)
    if not x or x.get("mean") is None:
        return "–"
    return f"{_f(x['mean'])} [{_f(x['lo'])}, {_f(x['hi'])}]" if interval else _f(x["mean"])


def summary_markdown(verdict_rows: Sequence[dict], levels: Sequence[str], levers: Sequence[str],
                     references: Sequence[str]) -> str:
    """One row per lever: its concept gain over stock per KL level with the Holm-adjusted t interval, its
    costs against stock (fluency Δℓ, relevance Δ; means), and the decision word against each reference."""
    by = {(v["lever"], v["versus"]): v for v in verdict_rows}
    refs = [r for r in references if any(v["versus"] == r for v in verdict_rows)]
    head = (["lever"] + [f"concept gain over stock, KL {lv}" for lv in levels]
            + [f"fluency Δℓ, KL {' / '.join(levels)}", f"relevance Δ, KL {' / '.join(levels)}"]
            + [f"vs {r}" for r in refs])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for lever in levers:
        row = [v for v in verdict_rows if v["lever"] == lever]
        if not row:
            continue
        stock = by.get((lever, "stock"), {})
        cells = [lever] + [_cell(stock, f"concept_{lv}") for lv in levels]
        cells += [" / ".join(_cell(stock, f"{e}_{lv}", False) for lv in levels) for e in ("fluency", "relevance")]
        cells += [by[(lever, r)]["decision"] if (lever, r) in by else "–" for r in refs]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def detail_markdown(rows: Sequence[dict], levels: Sequence[str], versus: str | None = None) -> str:
    """Every tested (pair, endpoint): mean [Holm-adjusted t interval] and what it shows, per KL level, and the
    achieved minimum detectable effect; ``versus`` keeps one reference's pairs."""
    keep = [r for r in rows if r["endpoint"] in {e.name for e in TESTED} and (versus is None or r["b"] == versus)]
    head = (["lever", "versus", "endpoint"] + [f"KL {lv}: mean [interval], reading" for lv in levels]
            + [f"MDE, KL {' / '.join(levels)}"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    seen: list[tuple[str, str, str]] = []
    for r in keep:
        key = (r["a"], r["b"], r["endpoint"])
        if key in seen:
            continue
        seen.append(key)
        mine = {x["kl_level"]: x for x in keep if (x["a"], x["b"], x["endpoint"]) == key}
        cells = [*key]
        for lv in levels:
            x = mine.get(lv)
            cells.append("–" if x is None or x["mean"] is None else
                         f"{_f(x['mean'])} [{_f(x['lo'])}, {_f(x['hi'])}] {x['reading']}")
        cells.append(" / ".join(_u((mine.get(lv) or {}).get("mde")) for lv in levels))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def rule_summary(rows: Sequence[dict], n_pairs: int, design, alpha: float) -> dict:
    """The rule's constants, the family's size, the predicted MDE of the concept gain (the design's prior variance
    components, concept-level t at Bonferroni's level alpha / m) and the achieved one (median over the concept
    comparisons of their own interval's MDE)."""
    m = n_claims(n_pairs)
    concepts = [r for r in rows if r["endpoint"] == "concept" and r["mde"] is not None and r["p_holm"] is not None]
    n_c = max((r["n_concepts"] for r in concepts), default=0)
    predicted = (minimum_detectable_effect(n_c, design.test_prompts, len(design.seeds), design.prior_sd_concept,
                                           design.prior_sd_item, m, alpha, POWER) if n_c >= 2 else None)
    return {"alpha": alpha, "power": POWER, "claims": m, "margins": {"concept": CONCEPT_MARGIN,
            "fluency": FLUENCY_MARGIN, "relevance": RELEVANCE_MARGIN}, "n_concepts": n_c,
            "predicted_mde": predicted,
            "achieved_mde": float(np.median([r["mde"] for r in concepts])) if concepts else None}


def rule_markdown(rule: dict) -> str:
    pred, got = _u(rule["predicted_mde"]), _u(rule["achieved_mde"])
    return (f"Holm over {rule['claims']} claims at family-wise alpha {rule['alpha']}; concept-level t intervals "
            f"({rule['n_concepts']} concepts). Minimum detectable concept gain at {rule['power']:.0%} power: "
            f"predicted {pred} (the design's prior variance components), achieved {got} (median over "
            f"the concept comparisons).\n")
