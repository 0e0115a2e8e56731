"""Surface strength: the stock model against the same surfaces with every coefficient scaled by s.

Scaling C → s·C scales the surfaces' correction S → s·S (gain 1 + s·S), so s = 0 is the stock model and s = 1
the trained surfaces. Sweeping s from 0.1 to 1 turns a saturated greedy change rate (one number) into a curve
on which another model's rate can be placed.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import torch

from geosteer.eval.compare import PairedComparison, summarize_by
from geosteer.eval.prompts import Prompt


def scaled(bank, s: float):
    """A copy of ``bank`` with every coefficient multiplied by ``s`` (walls and ranges kept)."""
    out = copy.deepcopy(bank)
    with torch.no_grad():
        out.coefficients.mul_(float(s))
    out.history = [*bank.history, {"edit": f"scale={s:g} (all surfaces)"}]
    return out


def strength_sweep(model, tok, bank, prompts: Sequence, scales: Sequence[float], *, max_new_tokens: int = 30,
                   log: Callable[[str], None] | None = None) -> tuple[list[dict], list[dict]]:
    """Stock (a) against the surfaces scaled by each ``s`` (b), per prompt: (rows with ``scale``, summary rows
    per scale and category, each scale's last row ``category == "all"``)."""

    prompts = [p if hasattr(p, "text") else Prompt(str(p)) for p in prompts]  # rows carry a category
    cmp = PairedComparison(model, tok, prompts, (), max_new_tokens=max_new_tokens)
    rows: list[dict] = []
    summary: list[dict] = []
    for s in scales:
        part = cmp.run([scaled(bank, s)], sample=False)
        for r in part:
            r["scale"] = float(s)
        rows += part
        summary += [{"scale": float(s), **r} for r in summarize_by(part, "category")]
        if log:
            last = summary[-1]
            log(f"scale {s:g}: greedy changed {last['greedy_change_rate']:.1%}, mean KL {last['mean_kl']:.4g}")
    return rows, summary


def interpolate_scale(summary: Sequence[dict], rate: float) -> float | None:
    """The smallest scale at which the overall greedy change rate reaches ``rate`` (linear between measured
    scales; None when no measured scale reaches it, 0 is the stock model with rate 0)."""
    pts = [(0.0, 0.0)] + sorted((r["scale"], r["greedy_change_rate"]) for r in summary if r["category"] == "all")
    for (s0, r0), (s1, r1) in zip(pts, pts[1:], strict=False):
        if r1 >= rate:
            return s0 + (s1 - s0) * (rate - r0) / (r1 - r0) if r1 > r0 else s0
    return None
