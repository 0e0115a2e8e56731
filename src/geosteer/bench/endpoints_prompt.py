"""The decision rule with the test prompt as the unit: a design whose ``unit`` is "prompt" (``--design instruct``).

Its claims are per concept on the steered model: "on this model, lever A moves concept c more than B at matched
control KL". For concept c, lever A against a reference B at one KL level and one endpoint
(:mod:`geosteer.bench.endpoints`: the concept score, the fluency and relevance costs, the score), the paired
differences d = A - B per (seed, prompt) of c's admitted records are averaged per test prompt over the seeds that
drew it (a prompt two seeds drew is one observation, not two), and the P prompt means m_p are the sample:

    D_c = (1/P) * sum_p m_p,   se = sd(m_p) / sqrt(P),   D_c +- t_{1 - alpha/2, P - 1} * se.

The interval covers the sampling of test prompts, conditional on the levers trained at the run's seeds (and the
judge each seed trained): a claim is about those trained levers on prompts like these, not about training them
again. Each (concept, pair, tested endpoint) is one claim "at every KL level", an intersection-union test (its p
is the largest of the levels' two-sided p); Holm's step-down runs over every claim made, all concepts and pairs
together: the claim of rank i by p among m gets its intervals at alpha / (m - i + 1). The readings and the words
(beats, worse, equivalent, undecided) are :mod:`geosteer.bench.endpoints`' own, per concept and pair.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from geosteer.bench import endpoints as E
from geosteer.bench.endpoints_report import _u, detail_markdown, summary_markdown
from geosteer.bench.stats import _paired, bca_interval, holm
from geosteer.bench.tdist import concept_t, detectable


def by_prompt(records: Sequence[dict], a: str, b: str, level: str, field: str) -> dict[str, dict[str, np.ndarray]]:
    """concept -> prompt -> the paired differences ``field``_a - ``field``_b of that prompt at every seed."""
    out: dict[str, dict[str, list[float]]] = {}
    for (concept, _seed, prompt), d in _paired(records, a, b, level, field):
        out.setdefault(concept, {}).setdefault(prompt, []).append(d)
    return {c: {p: np.asarray(v, dtype=float) for p, v in ps.items()} for c, ps in out.items()}


def prompt_t(diffs: dict[str, np.ndarray], alpha: float, null: float = 0.0) -> dict:
    """One concept's mean of the prompt means, its prompt-level t interval at 1 - alpha and two-sided p against
    ``null`` (None with fewer than 2 prompts); ``n_prompts``, ``n_items``."""
    out = concept_t(diffs, alpha, null)  # each key a prompt: the same t, across prompts
    out["n_prompts"] = out.pop("n_concepts")
    return out


def _cell(diffs: dict, concept: str, a: str, b: str, ep: E.Endpoint, lv: str, alpha: float) -> dict:
    return {"concept": concept, "a": a, "b": b, "endpoint": ep.name, "kl_level": str(lv),
            **prompt_t(diffs.get(concept, {}), alpha, ep.null), "alpha_ci": alpha}


def compare(records: Sequence[dict], pairs: Sequence[tuple[str, str]], levels: Sequence[str],
            alpha: float = 0.05, power: float = E.POWER) -> list[dict]:
    """One row per (concept, pair, endpoint, KL level), Holm over every (concept, pair, tested endpoint) claim
    made (module doc); the rows of :func:`geosteer.bench.endpoints.compare` with ``concept`` and ``n_prompts``
    (the BCa interval is over the concept's prompt means). A claim with a level of fewer than 2 prompts is left
    out of the family (its rows: no interval)."""
    concepts = sorted({str(r["concept"]) for r in records})
    diffs = {(a, b, ep.name, str(lv)): by_prompt(records, a, b, lv, ep.field)
             for a, b in pairs for ep in (*E.TESTED, E.SCORE) for lv in levels}
    rows: list[dict] = []
    claims: dict[tuple[str, str, str, str], list[dict]] = {}
    for c in concepts:
        for a, b in pairs:
            for ep in (*E.TESTED, E.SCORE):
                mine = [_cell(diffs[(a, b, ep.name, str(lv))], c, a, b, ep, lv, alpha) for lv in levels]
                rows += mine
                if ep.role != "descriptive" and all(r["p"] is not None for r in mine):
                    claims[(c, a, b, ep.name)] = mine
                elif ep.role != "descriptive":
                    for r in mine:
                        r.update(lo=None, hi=None)
    p_claim = {k: max(r["p"] for r in v) for k, v in claims.items()}
    adjusted, m = holm(p_claim), len(p_claim)  # type: ignore[arg-type]
    for rank, key in enumerate(sorted(p_claim, key=lambda k: p_claim[k]), start=1):
        level, ep = alpha / (m - rank + 1), E.ENDPOINTS[key[3]]
        for r in claims[key]:
            r.update({k: v for k, v in prompt_t(diffs[(*key[1:], r["kl_level"])][key[0]], level, ep.null).items()
                      if k in ("lo", "hi")})
            r.update(alpha_ci=level, p_claim=p_claim[key], p_holm=adjusted[key])
    for r in rows:
        r.setdefault("p_claim", None)
        r.setdefault("p_holm", None)
        r["mde"] = detectable(r["se"], r["df"], r["alpha_ci"], power) if r["se"] is not None else None
        r["reading"] = E.reading(r)
        d = diffs[(r["a"], r["b"], r["endpoint"], r["kl_level"])].get(r["concept"], {})
        out = None if r["se"] is None else bca_interval([v.mean() for v in d.values()], r["alpha_ci"], E.N_BCA, 0)
        r["bca"] = None if out is None else list(out)
    return rows


def verdicts(rows: Sequence[dict], pairs: Sequence[tuple[str, str]]) -> list[dict]:
    """Per concept and pair: the word (:func:`geosteer.bench.endpoints.decide`) and, per endpoint and level, the
    mean and interval (``<endpoint>_<level>``)."""
    out = []
    for c in sorted({r["concept"] for r in rows}):
        for a, b in pairs:
            mine = [r for r in rows if r["concept"] == c and r["a"] == a and r["b"] == b]
            v: dict = {"concept": c, "lever": a, "versus": b, "decision": E.decide(mine) if mine else "undecided",
                       "n_prompts": max((r["n_prompts"] for r in mine), default=0)}
            for r in mine:
                v[f"{r['endpoint']}_{r['kl_level']}"] = {k: r[k] for k in ("mean", "lo", "hi", "reading", "mde",
                                                                           "bca")}
            out.append(v)
    return out


def expected_prompts(pool: int, drawn: int, seeds: int) -> int:
    """The distinct test prompts of a concept, expected when each of ``seeds`` seeds draws ``drawn`` of a pool of
    ``pool`` without replacement: pool * (1 - (1 - drawn / pool)^seeds), rounded down (at least ``drawn``)."""
    if pool <= drawn:
        return pool
    return max(drawn, int(pool * (1 - (1 - drawn / pool) ** seeds)))


def predicted_mde(design, n_concepts: int, n_pairs: int, n_prompts: int, per_prompt: float,
                  alpha: float = 0.05, power: float = E.POWER) -> float:
    """The concept gain a prompt-level t test finds with ``power`` at Bonferroni's level alpha / m, m the claims
    of ``n_concepts`` concepts x ``n_pairs`` pairs: (t_{1 - a'/2, P - 1} + t_{power, P - 1}) * sd / sqrt(P),
    sd^2 = sd_prompt^2 + sd_seed^2 / r for P prompts read r times each (the design's ``prior_sd_prompt`` and
    ``prior_sd_seed``)."""
    if n_prompts < 2 or n_concepts < 1 or per_prompt < 1:
        raise ValueError("a prompt-level t test needs at least 2 prompts, 1 concept and 1 reading per prompt")
    from geosteer.bench.design import PRIOR_SD_PROMPT, PRIOR_SD_SEED

    sd_p = float(design.extra.get("prior_sd_prompt", PRIOR_SD_PROMPT))
    sd_s = float(design.extra.get("prior_sd_seed", PRIOR_SD_SEED))
    se = math.sqrt((sd_p**2 + sd_s**2 / per_prompt) / n_prompts)
    return detectable(se, n_prompts - 1, alpha / (n_concepts * E.n_claims(n_pairs)), power)


def rule_summary(rows: Sequence[dict], n_pairs: int, design, alpha: float) -> dict:
    """The rule's constants: the unit, the family (planned: concepts x pairs x tested endpoints; made), the
    prompts per concept, the predicted MDE of the concept gain (:func:`predicted_mde` at the prompts and readings
    per prompt measured) and the achieved one (median over the concept claims of their intervals' MDE)."""
    tested = [r for r in rows if r["endpoint"] in {e.name for e in E.TESTED}]
    concepts = [r for r in tested if r["endpoint"] == "concept" and r["mde"] is not None and r["p_holm"] is not None]
    n_c = len({r["concept"] for r in rows})
    n_p = int(np.median([r["n_prompts"] for r in concepts])) if concepts else 0
    per = float(np.median([r["n_items"] / r["n_prompts"] for r in concepts])) if concepts else 0.0
    made = len({(r["concept"], r["a"], r["b"], r["endpoint"]) for r in tested if r["p_claim"] is not None})
    return {"unit": "prompt", "alpha": alpha, "power": E.POWER, "claims": n_c * E.n_claims(n_pairs),
            "claims_made": made, "margins": {"concept": E.CONCEPT_MARGIN, "fluency": E.FLUENCY_MARGIN,
                                             "relevance": E.RELEVANCE_MARGIN},
            "n_concepts": n_c, "n_prompts": n_p, "readings_per_prompt": per,
            "predicted_mde": predicted_mde(design, n_c, n_pairs, n_p, per, alpha) if n_p >= 2 and per >= 1 else None,
            "achieved_mde": float(np.median([r["mde"] for r in concepts])) if concepts else None}


def rule_markdown(rule: dict) -> str:
    return (f"Holm over {rule['claims_made']} claims made ({rule['n_concepts']} concepts x lever pairs x tested "
            f"endpoints) at family-wise alpha {rule['alpha']}; prompt-level t intervals per concept (the unit is "
            f"the test prompt: {rule['n_prompts']} prompts per concept, a prompt's differences averaged over the "
            f"seeds that drew it, {rule['readings_per_prompt']:g} per prompt; the intervals cover the sampling of "
            f"prompts given the levers trained at the run's seeds). Minimum detectable concept gain at "
            f"{rule['power']:.0%} power: predicted {_u(rule['predicted_mde'])} (the design's prompt-level priors), "
            f"achieved {_u(rule['achieved_mde'])} (median over the concept claims).\n")


def verdict(records: Sequence[dict], levels: list[str], design, family: list[tuple[str, str]],
            levers: tuple[str, ...], references: tuple[str, ...], alpha: float) -> dict:
    """:func:`geosteer.bench.decide_report.endpoint_verdict` for a prompt-unit design: every interval
    (``endpoints``), the word per concept and pair (``verdicts``), the rule (``rule``), and the tables (``summary``:
    per concept, one row per lever; ``markdown``: the rule line, then per concept its summary and every tested
    comparison)."""
    rows = compare(records, family, levels, alpha)
    words = verdicts(rows, family)
    rule = rule_summary(rows, len(family), design, alpha)
    summary, detail = [], []
    for c in sorted({r["concept"] for r in rows}):
        head = f"Concept {c}:\n\n"
        table = summary_markdown([v for v in words if v["concept"] == c], levels, levers, references)
        summary.append(head + table)
        detail.append(head + table + "\n" + detail_markdown([r for r in rows if r["concept"] == c], levels))
    return {"endpoints": rows, "verdicts": words, "rule": rule, "summary": "\n".join(summary),
            "markdown": rule_markdown(rule) + "\n" + "\n".join(detail)}
