"""Interval estimates shared by the studies' evaluation scripts."""

from __future__ import annotations

import torch
from scipy import stats


def mean_ci(x: torch.Tensor, level: float = 0.95) -> dict:
    """Mean of ``x`` with its Student-t interval across the entries (the prompts): {mean, ci95, n}.

    One entry has no spread: its interval is (nan, nan).
    """
    x = x.detach().double().flatten()
    n = x.numel()
    mean = float(x.mean())
    half = float(stats.t.ppf(0.5 + level / 2, n - 1) * x.std() / n ** 0.5) if n > 1 else float("nan")
    return {"mean": mean, "ci95": [mean - half, mean + half], "n": n}
