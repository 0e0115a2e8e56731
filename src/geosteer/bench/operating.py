"""The operating-point rule: one function, applied to every lever alike.

Among a lever's candidate points measured on the validation prompts (the stock model, strength 0, always
among them), keep those whose mean control KL is at most the budget, and take the one with the highest mean
score; ties go to the lower control KL, then the lower strength. The test prompts never enter the choice.
"""

from __future__ import annotations

from collections.abc import Sequence


def choose_operating_point(summaries: Sequence[dict], kl_budget: float) -> int:
    """Index of the chosen point in ``summaries`` (each a :func:`geosteer.bench.scoring.summarize` result
    with a ``strength``); the stock model (control KL 0) is always one of them."""
    if not summaries:
        raise ValueError("no candidate points to choose from")
    eligible = [i for i, s in enumerate(summaries) if s["control_kl"]["mean"] <= kl_budget]
    if not eligible:
        raise ValueError("no candidate within the control-KL budget (the stock model, KL 0, should be one)")
    return max(eligible, key=lambda i: (summaries[i]["score"]["mean"], -summaries[i]["control_kl"]["mean"],
                                        -summaries[i].get("strength", 0.0)))
