"""Training configuration for any trainable intervention (surfaces, FFN gates, LoRA baselines, ...).

:class:`TrainConfig`: what a run learns with (optimiser, schedule, batches, evaluation cadence; recorded in
its checkpoints). :class:`RunConfig`: how one run is driven (checkpoint folder, resume, logging, hooks).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from geosteer.train.schedule import SCHEDULES, lr_lambda
from geosteer.train.tracking import check_trackers


@dataclass
class TrainConfig:
    """Hyper-parameters of :func:`geosteer.train.train`.

    A run is ``steps`` long, else ``ceil(tokens / (batch_size * seq_len))``; ``batch_size`` is global (shared
    over processes, gradients averaged), so any process count gives the same parameters up to rounding.
    """

    lr: float = 2e-2
    steps: int | None = None
    tokens: int | None = None
    batch_size: int = 8
    micro_batch: int | None = None  # split each process's share into chunks (gradient accumulation)
    seq_len: int = 128
    warmup_steps: int | None = None  # default: 5% of the steps (at least 1)
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    schedule: str = "cosine"  # cosine | linear | constant (geosteer.train.schedule)
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float | None = 1.0
    seed: int = 0
    eval_every: int = 0  # steps between held-out perplexity evaluations (0: only before/after)
    eval_tokens: int = 16384  # held-out tokens scored per evaluation (cap)
    eval_context: int = 512
    eval_stride: int = 256
    eval_batch: int = 4
    eval_before_after: bool = True
    checkpoint_every: int = 50  # steps between checkpoints (needs an output folder)
    log_every: int = 10
    mixed_precision: str = "no"  # accelerate: "no" | "fp16" | "bf16"
    fsdp: bool = False  # shard the frozen base model's layers over the processes (FSDP2); see geosteer.train
    # experiment trackers through accelerate (geosteer.train.tracking): e.g. "tensorboard" or
    # "tensorboard,wandb"; () logs nothing. log_dir: where file-based trackers write (default <out_dir>/logs)
    log_with: tuple[str, ...] = ()
    log_dir: str | None = None

    def __post_init__(self) -> None:
        self.betas = tuple(self.betas)  # JSON round trips give lists
        if self.log_with is None:
            self.log_with = ()
        elif isinstance(self.log_with, str):
            self.log_with = tuple(n.strip() for n in self.log_with.split(",") if n.strip())
        else:
            self.log_with = tuple(self.log_with)
        if self.log_dir is not None:
            self.log_dir = str(self.log_dir)
        self.validate()

    def validate(self) -> None:
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"lr must be a positive number, got {self.lr}")
        if self.steps is None and self.tokens is None:
            raise ValueError("give the run length: steps or tokens")
        if self.steps is not None and self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.tokens is not None and self.tokens < 1:
            raise ValueError(f"tokens must be >= 1, got {self.tokens}")
        for name in ("batch_size", "seq_len", "eval_tokens", "eval_context", "eval_stride", "eval_batch",
                     "log_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.micro_batch is not None and self.micro_batch < 1:
            raise ValueError(f"micro_batch must be >= 1, got {self.micro_batch}")
        if self.eval_every < 0 or self.checkpoint_every < 0:
            raise ValueError("eval_every and checkpoint_every must be >= 0 (0 turns them off)")
        if self.warmup_steps is not None and self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        if self.grad_clip is not None and self.grad_clip <= 0:
            raise ValueError(f"grad_clip must be > 0 or None, got {self.grad_clip}")
        if self.mixed_precision not in ("no", "fp16", "bf16"):
            raise ValueError(f"mixed_precision must be no, fp16 or bf16, got {self.mixed_precision!r}")

        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        if self.schedule != "cosine" and self.min_lr_ratio != 0.1:
            raise ValueError(f"min_lr_ratio applies to the cosine schedule only (schedule {self.schedule!r})")
        check_trackers(self.log_with)

    @property
    def total_steps(self) -> int:
        if self.steps is not None:
            return self.steps
        return max(1, math.ceil(self.tokens / (self.batch_size * self.seq_len)))

    @property
    def total_warmup(self) -> int:
        if self.warmup_steps is not None:
            return min(self.warmup_steps, self.total_steps)
        return max(1, round(0.05 * self.total_steps))

    def lr_factor(self, step: int) -> float:
        """Multiplier of ``lr`` for optimizer step ``step`` (0-based) under ``schedule``
        (:mod:`geosteer.train.schedule`; default: linear warmup, then cosine to ``min_lr_ratio``)."""

        return lr_lambda(self)(step)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["betas"] = list(self.betas)
        d["log_with"] = list(self.log_with)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown TrainConfig fields: {', '.join(unknown)}")
        return cls(**d)


# Fields that must agree between a checkpoint and the run that resumes it (they fix the data order,
# the schedule and the optimizer); the others (logging, evaluation cadence) may change on resume.
RESUME_KEYS = ("lr", "total_steps", "batch_size", "seq_len", "total_warmup", "min_lr_ratio",
               "weight_decay", "betas", "grad_clip", "seed", "schedule")
# What a checkpoint written before a key existed meant by it (checkpoints without "schedule" are cosine).
RESUME_DEFAULTS = {"schedule": "cosine"}


@dataclass
class RunConfig:
    """How :func:`geosteer.train.fit` drives one run (nothing here changes what the run computes).

    ``out_dir`` (checkpoints; ``resume``/``overwrite``), ``stop_at`` (end as if killed there), ``log``,
    ``progress``, ``callback(step, record)``, ``after_step()`` (numbers added to each record), ``record``
    (the caller's layout, checked on resume), ``checkpoint_extra``, ``checkpoint_at_start``, ``eval_before``,
    ``interventions`` (attached for the run), ``accelerator``, ``move_model``.
    """

    out_dir: str | Path | None = None
    resume: bool = False
    overwrite: bool = False
    stop_at: int | None = None
    progress: bool = True
    log: Callable[[str], None] | None = print
    callback: Callable[[int, dict], None] | None = None
    after_step: Callable[[], dict] | None = None
    record: dict | None = None
    checkpoint_extra: dict | None = None
    checkpoint_at_start: bool = False
    eval_before: bool = True
    interventions: Sequence = ()
    accelerator: Any = None
    move_model: bool = True

    def say(self, line: str) -> None:
        if self.log is not None:
            self.log(line)
