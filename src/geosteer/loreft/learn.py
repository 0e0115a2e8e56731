"""Learn a LoReFT that steers towards a behaviour (``geosteer learn loreft``).

:class:`geosteer.train.PromptObjective` with ``promote=True``: loss = −(target − negative log-prob) +
kl_weight·[max(0, KL_next − τ) + max(0, KL_all − τ)] on a :class:`LoReFT` that starts neutral (W = R, b = 0),
R kept orthonormal, full batch in :func:`geosteer.train.fit` (resume exact). The result is the LoReFT artifact.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from geosteer.errors import GeosteerError
from geosteer.interventions import steer
from geosteer.loreft.artifact import save_loreft
from geosteer.loreft.intervention import LoReFT
from geosteer.outputs import check_output_folder
from geosteer.train import FullBatch, PromptObjective, PromptSets, RunConfig, TrainConfig, fit
from geosteer.train.objective import forward_logits, objective_terms
from geosteer.train.prompts import control_logprobs, encode_controls, encode_targets, target_logprob


@dataclass
class LoReFTLearnConfig:
    """Settings of one LoReFT run (recorded in the checkpoint and the artifact)."""

    layers: list[int] | None = None  # None: every layer
    rank: int = 4
    steps: int = 30
    lr: float = 0.002  # AdamW on R, W, b (constant)
    kl_threshold: float = 0.02  # τ (nats)
    kl_weight: float = 100.0
    grad_clip: float | None = 1.0
    seed: int = 0
    checkpoint_every: int = 5

    def __post_init__(self) -> None:
        if self.rank < 1:
            raise GeosteerError(f"the LoReFT rank must be >= 1 (got {self.rank})")
        if self.steps < 1:
            raise GeosteerError(f"steps must be >= 1 (got {self.steps})")
        for name in ("lr", "kl_threshold"):
            v = getattr(self, name)
            if not (v > 0 and math.isfinite(v)):
                raise GeosteerError(f"{name} must be a positive number (got {v})")
        if not (self.kl_weight >= 0 and math.isfinite(self.kl_weight)):
            raise GeosteerError(f"kl_weight must be >= 0 (got {self.kl_weight})")
        if self.checkpoint_every < 0:
            raise GeosteerError("checkpoint_every must be >= 0")

    def to_dict(self) -> dict:
        return asdict(self)


def _fingerprint(sets: PromptSets, cfg: LoReFTLearnConfig, layers: list[int]) -> str:
    return sets.fingerprint({**cfg.to_dict(), "layers": layers, "steps": None, "checkpoint_every": None})


def train_eval(model, lo: LoReFT, sets: PromptSets, ref: dict) -> dict:
    """The learned LoReFT (strength 1) on the training prompts, against the stock model."""
    with torch.no_grad(), steer(model, lo.with_(strength=1.0)):
        got = objective_terms(model, sets, ref["controls"])
    te = {"target_gain": float((got["target_logprob"] - ref["target"]).mean()), "kl": float(got["kl"]),
          "kl_last": float(got["kl_last"])}
    if sets.negatives is not None:
        te["negative_drop"] = float((ref["negative"] - got["negative_logprob"]).mean())
    return te


def _references(model, sets: PromptSets) -> dict:
    with torch.no_grad():
        ref = {"controls": control_logprobs(forward_logits(model, sets.controls), sets.controls)[0],
               "target": target_logprob(forward_logits(model, sets.targets), sets.targets)}
        if sets.negatives is not None:
            ref["negative"] = target_logprob(forward_logits(model, sets.negatives), sets.negatives)
    return ref


def learn_loreft(model, tok, targets: list[dict], controls: list[str], cfg: LoReFTLearnConfig, out, *,
                 negatives: list[dict] | None = None, resume: bool = False, overwrite: bool = False,
                 stop_at: int | None = None, command: str | None = None,
                 log: Callable[[str], None] | None = print) -> tuple[LoReFT, dict]:
    """Learn a LoReFT and write its artifact folder ``out`` (state in ``<out>.train/``); (LoReFT, report).

    ``stop_at``: end after that many steps as if killed (no artifact written; resume later)."""
    if not targets or not controls:
        raise GeosteerError("the target and control prompt sets must not be empty")
    out = Path(out)
    check_output_folder(out, "geosteer-loreft", what="--out")
    lo = LoReFT.for_model(model, cfg.rank, cfg.layers, seed=cfg.seed).trainable(seed=cfg.seed)
    sets = PromptSets(encode_targets(tok, targets), encode_controls(tok, controls),
                      encode_targets(tok, negatives) if negatives else None)
    ref = _references(model, sets)
    tcfg = TrainConfig(lr=cfg.lr, steps=cfg.steps, batch_size=1, seq_len=1, warmup_steps=0, min_lr_ratio=1.0,
                       grad_clip=cfg.grad_clip, seed=cfg.seed, checkpoint_every=cfg.checkpoint_every,
                       eval_before_after=False, log_every=1)
    record = {"objective": "promote", "lever": "loreft", "layers": lo.layers, "rank": lo.rank,
              "negatives": len(negatives or [])}
    options = RunConfig(out_dir=Path(str(out) + ".train"), resume=resume, overwrite=overwrite, stop_at=stop_at,
                        progress=False, log=log, record=record, checkpoint_at_start=True, interventions=(lo,),
                        move_model=False)
    objective = PromptObjective(ref["controls"], True, cfg.kl_threshold, cfg.kl_weight)
    res = fit(model, lo, tcfg, FullBatch(sets, _fingerprint(sets, cfg, lo.layers), sets.tokens), loss=objective,
              options=options)
    lo.freeze()
    if res.stopped_early:
        return lo, {"stopped": True, "steps_done": res.steps_done}
    report = {"config": cfg.to_dict(), "layers": lo.layers, "history": res.history,
              "train_eval": train_eval(model, lo, sets, ref)}
    lo.meta = {"learn": {k: v for k, v in report.items() if k != "history"}, "train_eval": report["train_eval"]}
    save_loreft(lo, out, command=command)
    if log is not None:
        te = report["train_eval"]
        log(f"result on the training prompts: target log-prob gain {te['target_gain']:.4g}, control KL "
            f"{te['kl']:.4g} (last token {te['kl_last']:.4g}); saved {out}")
    return lo, report
