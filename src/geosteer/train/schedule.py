"""Learning-rate schedules of the training loop: one ``LambdaLR`` built by :func:`make_scheduler`.

Step s (0-based), warmup w, run length n, r = ``cfg.min_lr_ratio``:

- ``cosine`` (default): (s + 1)/w for s < w, then r + (1 − r)·0.5·(1 + cos(π p)), p = min(1, (s − w)/max(1, n − w − 1))
  (peak held at steps w − 1 and w; the last step runs at exactly r);
- ``linear`` / ``constant``: transformers' ``get_linear_schedule_with_warmup`` / ``get_constant_schedule_with_warmup``.

The cosine is geosteer's own formula: transformers' variants are one step off in warmup or decay, which would
change the lr of a run resumed from an older checkpoint (tests/train/test_schedule.py checks it bit for bit).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Protocol

import torch


class ScheduleSettings(Protocol):
    """What a schedule reads of a run's settings (:class:`geosteer.train.TrainConfig` has these fields)."""

    schedule: str
    total_warmup: int
    total_steps: int
    min_lr_ratio: float

SCHEDULES = ("cosine", "linear", "constant")


def cosine_factor(step: int, *, warmup: int, total: int, min_lr_ratio: float) -> float:
    """geosteer's warmup + cosine factor (see the module docstring; unchanged since the first release)."""
    w, n = warmup, total
    if step < w:
        return (step + 1) / w
    if n <= w:
        return 1.0
    progress = min(1.0, (step - w) / max(1, n - w - 1))
    return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def lr_lambda(cfg: ScheduleSettings) -> Callable[[int], float]:
    """The factor function of ``cfg.schedule`` (a picklable ``functools.partial``)."""
    w, n = cfg.total_warmup, cfg.total_steps
    if cfg.schedule == "cosine":
        return partial(cosine_factor, warmup=w, total=n, min_lr_ratio=cfg.min_lr_ratio)
    from transformers.optimization import get_constant_schedule_with_warmup, get_linear_schedule_with_warmup

    # transformers builds a LambdaLR around its factor function; take that function (on a throwaway
    # optimizer, so that the caller's optimizer is set up once, by make_scheduler).
    scratch = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    if cfg.schedule == "linear":
        hf = get_linear_schedule_with_warmup(scratch, num_warmup_steps=w, num_training_steps=n)
    elif cfg.schedule == "constant":
        hf = get_constant_schedule_with_warmup(scratch, num_warmup_steps=w)
    else:
        raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, got {cfg.schedule!r}")
    return hf.lr_lambdas[0]


def make_scheduler(optimizer: torch.optim.Optimizer, cfg: ScheduleSettings) -> torch.optim.lr_scheduler.LambdaLR:
    """The ``LambdaLR`` of ``cfg.schedule`` on ``optimizer`` (its state dict is the same for every schedule
    and for checkpoints of earlier geosteer versions: ``load_state_dict`` of one resumes the other)."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg))
