"""The one training rule of every learned lever: a pool, mini-batches, a control-KL target, a step cap, one clip.

Every learned lever (the preference-trained vector, LoReFT, LoRA, the surfaces) is trained by
:func:`fit_rule` on the shared preference objective (:mod:`geosteer.bench.training`):

- **the pool**: each side's lever texts cut into passages of ``train_words`` words, taken in turn from the texts
  (:func:`pool_texts`) until ``pool`` passages a side (32 in the decisive design; a concept with fewer words is
  recorded with its smaller pool); each passage is the answer to a generic request;
- **mini-batches**: each step draws ``batch`` passages a side from the pool (seeded by the setup's seed and the
  step), the training controls of the KL hinge in full;
- **the stop**: every ``kl_every`` steps the lever's own change at s = 1 is read on the control prompts (mean
  next-token KL against the stock model, the quantity :mod:`geosteer.bench.kl_match` matches); training stops
  at the first check with KL >= (1 − ``kl_tol``) × ``kl_target``, or at ``max_steps`` (the cap, reported);
- **the same clipping** (gradient norm ``grad_clip``) and hinge τ (``hinge_tau``) for all;
- **the log**: loss, preference margin (mean toward minus mean away log-prob) and, where checked, the s = 1
  control KL per step.

The learning rate is chosen per lever on the dev concepts by :class:`LrSearch`: the grid, extended by ×3 steps
past an edge choice (at most :data:`MAX_EXTEND` a side) until the choice is interior; the test phase's step
cap is :func:`step_cap` of the steps the levers needed there.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field

import torch

EXTEND_FACTOR = 3.0
MAX_EXTEND = 3  # extra grid points a side
CAP_MARGIN = 1.25  # the test phase's cap: the most steps a lever needed on the dev concepts, x 1.25


@dataclass(frozen=True)
class TrainRule:
    """How a learned lever is trained (module docstring); ``kl_target`` None: no stop before ``max_steps``,
    ``batch`` None: every pool passage at every step (full batch)."""

    max_steps: int
    pool: int
    batch: int | None = None
    kl_target: float | None = None
    kl_every: int = 2
    kl_tol: float = 0.1
    hinge_tau: float = 0.1
    grad_clip: float = 1.0

    def to_dict(self) -> dict:
        return asdict(self)


def pool_texts(texts: Sequence[str], pool: int, words: int) -> list[str]:
    """Up to ``pool`` distinct passages of ``words`` words: the first passage of each text in turn, then the
    second of each, and so on (a text shorter than ``words`` words is one passage)."""
    chunks = []
    for t in texts:
        w = t.split()
        chunks.append([" ".join(w[i:i + words]) for i in range(0, len(w), words)] or [""])
    out: list[str] = []
    for row in range(max((len(c) for c in chunks), default=0)):
        for c in chunks:
            if row < len(c) and c[row] and c[row] not in out and len(out) < pool:
                out.append(c[row])
    return out


def pool_pairs(setup, texts: Sequence[str], pool: int) -> list[dict]:
    """The pool as ``{"prompt", "target"}`` pairs, each passage the answer to a generic request in turn."""
    prompts = setup.train_prompts
    sep = "" if setup.chat else " "
    return [{"prompt": prompts[i % len(prompts)], "target": sep + t}
            for i, t in enumerate(pool_texts(texts, pool, setup.budget.train_words))]


def _rows(batch, idx: torch.Tensor):
    from geosteer.train.prompts import Batch

    return Batch(batch.ids[idx], batch.lengths[idx], None if batch.target is None else batch.target[idx],
                 None if batch.target_ids is None else [batch.target_ids[int(i)] for i in idx])


@dataclass(frozen=True)
class PoolBatches:
    """Seeded mini-batches of the pool for :func:`geosteer.train.fit`: ``batch`` rows a side per step (all of
    them when None), the controls in full."""

    sets: object  # geosteer.train.objective.PromptSets of the whole pool
    per_side: int | None
    seed: int
    fingerprint: str
    tokens_per_step: int

    def _pick(self, n: int, step: int, side: int) -> torch.Tensor:
        if self.per_side is None or self.per_side >= n:
            return torch.arange(n)
        g = torch.Generator().manual_seed((self.seed * 1_000_003 + step * 31 + side) % (2**31))
        return torch.randperm(n, generator=g)[: self.per_side].sort().values

    def batch_at(self, step: int):
        from geosteer.train.objective import PromptSets

        s = self.sets
        neg = None if s.negatives is None else _rows(s.negatives, self._pick(s.negatives.ids.shape[0], step, 1))
        return PromptSets(_rows(s.targets, self._pick(s.targets.ids.shape[0], step, 0)), s.controls, neg)

    def batch(self, step: int, rank: int, world: int, device):
        from geosteer.train.data import StepBatch

        return StepBatch(step, self.batch_at(step))

    def chunks(self, batch, micro_batch: int | None) -> Iterator[tuple[object, float]]:
        yield batch, 1.0


class _Reached(Exception):
    """Raised by the step callback to end training at the control-KL target."""


@dataclass
class StepLog:
    """The per-step record of one training run (loss, margin, s = 1 control KL where checked)."""

    rule: TrainRule
    kl_probe: Callable[[], float] | None
    steps: list[dict] = field(default_factory=list)
    reached: bool = False

    def __call__(self, step: int, rec: dict) -> None:
        row = {"step": step, "loss": round(float(rec["loss"]), 6), "grad_norm": round(float(rec["grad_norm"]), 6)}
        if "negative_logprob" in rec:
            row["margin"] = round(float(rec["target_logprob"] - rec["negative_logprob"]), 6)
        r = self.rule
        check = r.kl_target is not None and self.kl_probe is not None and (step % r.kl_every == 0
                                                                          or step == r.max_steps)
        if check:
            with torch.no_grad():
                row["kl_s1"] = round(float(self.kl_probe()), 6)
        self.steps.append(row)
        if check and row["kl_s1"] >= (1 - r.kl_tol) * r.kl_target:
            self.reached = True
            raise _Reached

    def summary(self) -> dict:
        kls = [s["kl_s1"] for s in self.steps if "kl_s1" in s]
        return {"steps": len(self.steps), "reached": self.reached if self.rule.kl_target is not None else None,
                "capped": not self.reached and len(self.steps) >= self.rule.max_steps,
                "final_kl": kls[-1] if kls else None, "kl_target": self.rule.kl_target,
                "final_loss": self.steps[-1]["loss"] if self.steps else None,
                "final_margin": self.steps[-1].get("margin") if self.steps else None}


def _digest(sets) -> str:
    parts = [b.ids.numpy().tobytes() for b in (sets.targets, sets.controls, sets.negatives) if b is not None]
    return hashlib.sha256(b"".join(parts)).hexdigest()


def fit_rule(setup, module, lr: float, name: str, sets, objective, rule: TrainRule,
             kl_probe: Callable[[], float] | None = None) -> dict:
    """Train ``module`` (attached while training) on ``objective`` over the pool ``sets`` by ``rule``; the last
    logged numbers, the run's summary (:meth:`StepLog.summary`) and its per-step log (``log``)."""
    from geosteer.train import RunConfig, TrainConfig, fit

    tcfg = TrainConfig(lr=lr, steps=rule.max_steps, batch_size=1, seq_len=1, warmup_steps=0, min_lr_ratio=1.0,
                       grad_clip=rule.grad_clip, seed=setup.seed, checkpoint_every=0, eval_before_after=False,
                       log_every=max(1, rule.max_steps))
    log = StepLog(rule, kl_probe)
    options = RunConfig(out_dir=None, progress=False, log=None, interventions=(module,), move_model=False,
                        record={"lever": name}, callback=log)
    data = PoolBatches(sets, rule.batch, setup.seed, _digest(sets), sets.tokens)
    last: dict = {}
    try:
        res = fit(setup.model, module, tcfg, data, loss=objective, options=options)
        last = res.history[-1] if res.history else {}
    except _Reached:
        pass
    module.requires_grad_(False)
    out = {k: round(float(v), 5) for k, v in last.items() if isinstance(v, (int, float))}
    if not out and log.steps:
        out = {k: v for k, v in log.steps[-1].items() if k != "kl_s1"}
    return {**out, **log.summary(), "log": log.steps}


class LrSearch:
    """The learning-rate choice of one lever: the best mean score over the dev concepts on ``grid``, the grid
    extended by ×:data:`EXTEND_FACTOR` past an edge choice (at most :data:`MAX_EXTEND` a side) until the choice
    is interior. ``pending()`` lists the rates still to measure; ``add(lr, score)`` records one; ties: the
    smaller rate."""

    def __init__(self, grid: Sequence[float], factor: float = EXTEND_FACTOR, max_extend: int = MAX_EXTEND):
        if len(grid) < 3 or list(grid) != sorted(set(grid)):
            raise ValueError(f"a learning-rate grid needs >= 3 sorted rates, got {list(grid)}")
        self.grid, self.factor, self.max_extend = [float(x) for x in grid], factor, max_extend
        self.scores: dict[float, float] = {}
        self.extended = {"down": 0, "up": 0}

    def add(self, lr: float, score: float) -> None:
        self.scores[float(lr)] = float(score)

    def chosen(self) -> float | None:
        ok = {lr: s for lr, s in self.scores.items() if not math.isnan(s)}
        if not ok:
            return None
        best = max(ok.values())
        return min(lr for lr, s in ok.items() if s == best)

    def pending(self) -> list[float]:
        """The rates to measure next (empty: the search is done)."""
        missing = [lr for lr in self.grid if lr not in self.scores]
        if missing:
            return missing
        c = self.chosen()
        if c is None:
            return []
        if c == self.grid[0] and self.extended["down"] < self.max_extend:
            self.extended["down"] += 1
            self.grid.insert(0, c / self.factor)
            return [self.grid[0]]
        if c == self.grid[-1] and self.extended["up"] < self.max_extend:
            self.extended["up"] += 1
            self.grid.append(c * self.factor)
            return [self.grid[-1]]
        return []

    def interior(self) -> bool:
        c = self.chosen()
        return c is not None and self.grid[0] < c < self.grid[-1]

    def to_dict(self) -> dict:
        return {"grid": list(self.grid), "scores": {f"{k:g}": v for k, v in sorted(self.scores.items())},
                "chosen": self.chosen(), "interior": self.interior(), "extended": dict(self.extended)}


def search(grid: Sequence[float], score: Callable[[float], float], **kw) -> LrSearch:
    """Run :class:`LrSearch` to the end with one scoring function (the dev phase batches its rounds instead)."""
    s = LrSearch(grid, **kw)
    while todo := s.pending():
        for lr in todo:
            s.add(lr, score(lr))
    return s


def step_cap(needed: Sequence[int | None], max_steps: int, margin: float = CAP_MARGIN) -> dict:
    """The test phase's step cap from the steps each lever needed on the dev concepts (None: not reached within
    ``max_steps``): the most needed × ``margin``, at most ``max_steps``; ``all_reached`` says whether every
    lever reached the target there."""
    got = [int(n) for n in needed if n is not None]
    all_reached = bool(needed) and len(got) == len(needed)
    cap = max_steps if not got or not all_reached else min(max_steps, math.ceil(max(got) * margin))
    return {"cap": int(cap), "max_needed": max(got) if got else None, "all_reached": all_reached,
            "max_steps": int(max_steps)}
