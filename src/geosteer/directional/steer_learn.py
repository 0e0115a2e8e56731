"""Learn per-layer ∥/⊥ scales that steer towards a behaviour (``geosteer learn scales``).

:class:`geosteer.train.PromptObjective` with ``promote=True``: loss = −(target − negative log-prob) +
kl_weight·[max(0, KL_next − τ) + max(0, KL_all − τ)] on :class:`LearnedScales` (stock at start), full batch
in :func:`geosteer.train.fit` (resume exact). The result is a recipe folder.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from geosteer.directional.config import RESIDUAL_SITES
from geosteer.directional.learned import LearnedScales
from geosteer.directional.scales_artifact import save_scales
from geosteer.errors import GeosteerError
from geosteer.interventions import steer
from geosteer.models.anatomy import anatomy
from geosteer.models.loading import model_id
from geosteer.outputs import check_output_folder
from geosteer.recipe import InterventionSpec
from geosteer.train import FullBatch, RunConfig, TrainConfig, fit
from geosteer.train.objective import PromptObjective, PromptSets, forward_logits, objective_terms
from geosteer.train.prompts import control_logprobs, encode_controls, encode_targets, target_logprob


@dataclass
class ScaleLearnConfig:
    """Settings of one scale-learning run (recorded in the checkpoint and the artifact)."""

    site: str = "attn_out"
    layers: list[int] | None = None  # None: every layer
    steps: int = 30
    lr: float = 0.02  # AdamW on the scales (constant)
    kl_threshold: float = 0.02  # τ (nats)
    kl_weight: float = 100.0
    seed: int = 0
    checkpoint_every: int = 5

    def __post_init__(self) -> None:

        if self.site not in RESIDUAL_SITES:
            raise GeosteerError(f"learned scales edit a residual site; valid: {', '.join(RESIDUAL_SITES)} "
                                f"(got '{self.site}')")
        if not (self.kl_threshold > 0 and math.isfinite(self.kl_threshold)):
            raise GeosteerError(f"the KL threshold must be a positive number of nats (got {self.kl_threshold})")
        if self.steps < 1:
            raise GeosteerError(f"steps must be >= 1 (got {self.steps})")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise GeosteerError(f"lr must be a positive number (got {self.lr})")
        if not (self.kl_weight >= 0 and math.isfinite(self.kl_weight)):
            raise GeosteerError(f"kl_weight must be >= 0 (got {self.kl_weight})")
        if self.checkpoint_every < 0:
            raise GeosteerError("checkpoint_every must be >= 0")

    def to_dict(self) -> dict:
        return asdict(self)


def _fingerprint(sets: PromptSets, cfg: ScaleLearnConfig, layers: list[int]) -> str:
    return sets.fingerprint({**cfg.to_dict(), "layers": layers, "steps": None, "checkpoint_every": None})


def stock_references(model, sets: PromptSets) -> dict:
    """The stock model's control log-probs and target (negative) log-probs."""
    with torch.no_grad():
        ref = {"controls": control_logprobs(forward_logits(model, sets.controls), sets.controls)[0],
               "target": target_logprob(forward_logits(model, sets.targets), sets.targets)}
        if sets.negatives is not None:
            ref["negative"] = target_logprob(forward_logits(model, sets.negatives), sets.negatives)
    return ref


def train_eval(model, scales: LearnedScales, sets: PromptSets, ref: dict) -> dict:
    """The learned scales on the training prompts, against the stock model."""

    with torch.no_grad(), steer(model, scales):
        got = objective_terms(model, sets, ref["controls"])
    te = {"target_logprob": float(got["target_logprob"].mean()),
          "target_gain": float((got["target_logprob"] - ref["target"]).mean()),
          "kl": float(got["kl"]), "kl_last": float(got["kl_last"])}
    if sets.negatives is not None:
        te["negative_drop"] = float((ref["negative"] - got["negative_logprob"]).mean())
    return te


def learn_scales(model, tok, targets: list[dict], controls: list[str], cfg: ScaleLearnConfig, out, *,
                 negatives: list[dict] | None = None, resume: bool = False, overwrite: bool = False,
                 stop_at: int | None = None, command: str | None = None,
                 log: Callable[[str], None] | None = print) -> tuple[LearnedScales, dict]:
    """Learn the scales and write the recipe folder ``out`` (state in ``<out>.train/``); (scales, report).

    ``stop_at``: end after that many steps as if killed (no recipe written; resume later)."""

    if not targets or not controls:
        raise GeosteerError("the target and control prompt sets must not be empty")
    out = Path(out)
    check_output_folder(out, "geosteer-recipe", what="--out")  # never over a folder of the user's files
    layers = anatomy(model).check_layers(cfg.layers)
    sets = PromptSets(encode_targets(tok, targets), encode_controls(tok, controls),
                      encode_targets(tok, negatives) if negatives else None)
    ref = stock_references(model, sets)
    scales = LearnedScales(cfg.site, layers)
    tcfg = TrainConfig(lr=cfg.lr, steps=cfg.steps, batch_size=1, seq_len=1, warmup_steps=0, min_lr_ratio=1.0,
                       grad_clip=None, seed=cfg.seed, checkpoint_every=cfg.checkpoint_every,
                       eval_before_after=False, log_every=1)
    record = {"objective": "promote", "lever": "directional-scales", "site": cfg.site, "layers": layers,
              "negatives": len(negatives or [])}
    options = RunConfig(out_dir=Path(str(out) + ".train"), resume=resume, overwrite=overwrite, stop_at=stop_at,
                        progress=False, log=log, record=record, checkpoint_at_start=True, interventions=(scales,),
                        move_model=False)
    objective = PromptObjective(ref["controls"], True, cfg.kl_threshold, cfg.kl_weight)
    res = fit(model, scales, tcfg, FullBatch(sets, _fingerprint(sets, cfg, layers), sets.tokens), loss=objective,
              options=options)
    if res.stopped_early:
        return scales, {"stopped": True, "steps_done": res.steps_done}
    report = {"config": cfg.to_dict(), "layers": layers, "scales": scales.scales(), "history": res.history,
              "reference": {"target_logprob": float(ref["target"].mean())},
              "train_eval": train_eval(model, scales, sets, ref)}
    _write_recipe(model, scales, out, report, command)
    if log is not None:
        te = report["train_eval"]
        log(f"result on the training prompts: target log-prob gain {te['target_gain']:.4g}, control KL "
            f"{te['kl']:.4g} (last token {te['kl_last']:.4g}); saved {out}")
    return scales, report


def _write_recipe(model, scales: LearnedScales, out: Path, report: dict, command: str | None) -> Path:
    """The scales artifact inside a recipe folder (``scale_learned=<artifact>``)."""

    base = model_id(model)
    meta = {"steer_learn": {k: v for k, v in report.items() if k != "history"}}
    with tempfile.TemporaryDirectory(prefix="geosteer-scales-") as tmp:
        art = save_scales(scales, Path(tmp) / "scales", base_model=base, n_layers=anatomy(model).n_layers,
                          meta=meta, command=command)
        return InterventionSpec(scale_learned=str(art)).save(out, base_model=base, command=command)
