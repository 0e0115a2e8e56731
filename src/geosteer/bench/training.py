"""The one training objective of every learned lever, and the run of it on any trainable intervention.

Every learned lever (preference vector, LoReFT, LoRA, steering surfaces; walls only suppress) optimises
:class:`geosteer.train.PromptObjective` with ``promote=True``: raise the summed log-prob of the toward texts and
lower that of the away texts, each as the answer to a generic request
(:func:`geosteer.bench.prompts.training_pairs`), plus the control-KL hinge (on the neutral training controls,
against the stock model), by one training rule (:mod:`geosteer.bench.train_rule`: the setup's ``rule``, else the
budget's number of full-batch AdamW steps) at the lever's learning rate. The levers differ in what they
parametrise, not in what they are asked.

The preference-trained vector and LoReFT are trained here on their methods' public trainable forms
(:class:`geosteer.vectors.TrainableVectors`, :meth:`geosteer.loreft.LoReFT.trainable`) and saved as those
methods' artifacts, so that a lever's point is a recipe (:func:`geosteer.bench.registry.recipe_point`).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from torch import nn

from geosteer import anatomy
from geosteer.bench.train_rule import TrainRule, fit_rule, pool_pairs
from geosteer.loreft import LoReFT
from geosteer.methods import save_artifact
from geosteer.vectors import TrainableVectors

KL_WEIGHT = 100.0


def rule_of(setup) -> TrainRule:
    """The setup's training rule; a setup without one: its budget's steps, full batch on its lever texts, no KL
    stop."""
    if getattr(setup, "rule", None) is not None:
        return setup.rule
    b = setup.budget
    return TrainRule(max_steps=b.steps, pool=b.train_texts, hinge_tau=setup.train_tau)


def prompt_sets(setup, rule: TrainRule | None = None):
    """The encoded training sets (toward pool, controls, away pool), BOS first."""
    from geosteer.bench.prompts import training_pairs
    from geosteer.train.objective import PromptSets
    from geosteer.train.prompts import encode_controls, encode_targets

    tok = setup.tok
    if rule is None or getattr(setup, "rule", None) is None:
        toward, away = training_pairs(setup, setup.toward), training_pairs(setup, setup.away)
    else:
        toward, away = pool_pairs(setup, setup.toward, rule.pool), pool_pairs(setup, setup.away, rule.pool)
    return PromptSets(encode_targets(tok, toward, True), encode_controls(tok, setup.train_controls, True),
                      encode_targets(tok, away, True))


def fit_module(setup, module: nn.Module, lr: float, name: str) -> dict:
    """Train ``module`` (an intervention with ``attach``) on the shared objective by the setup's training rule
    (:func:`geosteer.bench.train_rule.fit_rule`); the last logged numbers, the run's summary and per-step log."""
    import torch

    from geosteer.train.objective import PromptObjective, forward_logits
    from geosteer.train.prompts import control_logprobs

    rule = rule_of(setup)
    sets = prompt_sets(setup, rule)
    with torch.no_grad():
        ref = control_logprobs(forward_logits(setup.model, sets.controls), sets.controls)[0]
    objective = PromptObjective(ref, True, rule.hinge_tau, KL_WEIGHT)
    out = fit_rule(setup, module, lr, name, sets, objective, rule, getattr(setup, "kl_probe", None))
    out["pool"] = [int(sets.targets.ids.shape[0]), int(sets.negatives.ids.shape[0])]
    return out


def brief(record: dict) -> dict:
    """A training record without its per-step log (what an artifact's metadata keeps)."""
    return {k: v for k, v in record.items() if k != "log"}


def _middle(model) -> int:
    return anatomy(model).n_layers // 2


def vector_module(setup, layer: int | None = None) -> TrainableVectors:
    """A trainable steering vector after ``layer`` (default: the middle one), zero (the stock model)."""
    return TrainableVectors.for_model(setup.model, [_middle(setup.model) if layer is None else int(layer)])


def _artifact_folder(setup, name: str) -> Path:
    """A fresh folder for one build's artifact under the setup's work folder: builds of the same lever at
    other learning rates or seeds may share that work folder, also at the same time in other processes."""
    Path(setup.work).mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=setup.work)) / name


def remove_artifact(folder: str) -> None:
    """Delete what :func:`save_vector` / :func:`train_loreft` wrote (a lever's cleanup)."""
    shutil.rmtree(Path(folder).parent, ignore_errors=True)


def save_vector(setup, module: TrainableVectors, name: str, info: dict | None = None) -> str:
    """The trained vector as a steering-vectors artifact in a fresh folder under the lever's work folder
    (recipe key ``vectors``; ``vector_scale`` is its strength; :func:`remove_artifact` deletes it)."""
    sv = module.to_vectors(setup.model, {"objective": "bench preference", "n_positive": len(setup.toward),
                                         "n_negative": len(setup.away), **(info or {})})
    return str(save_artifact(sv, _artifact_folder(setup, name)))


def train_vector(setup, lr: float, name: str = "vector") -> tuple[str, dict]:
    """A preference-trained vector after the middle layer: (its artifact folder, its record)."""
    mod = vector_module(setup)
    last = fit_module(setup, mod, lr=lr, name=name)
    return save_vector(setup, mod, name, {"lr": lr}), {"train": last, "layer": mod.layers[0], "lr": lr,
                                                       "norm": round(float(mod.vectors.norm()), 4)}


def train_loreft(setup, lr: float, rank: int, layers: list[int] | None, name: str = "loreft") -> tuple[str, dict]:
    """LoReFT (rank ``rank`` after each of ``layers``, None: every layer) trained on the shared objective:
    (its artifact folder, its record: trainable count, last step, layers); :func:`remove_artifact` deletes it."""
    lo = LoReFT.for_model(setup.model, rank, layers, seed=setup.seed).trainable(seed=setup.seed)
    last = fit_module(setup, lo, lr=lr, name=name)
    lo.freeze()
    lo.meta = {"objective": "bench preference", "lr": lr, "train": brief(last)}
    return str(save_artifact(lo, _artifact_folder(setup, name))), {"train": last, "layers": lo.layers, "rank": rank,
                                                        "params": lo.n_parameters(), "lr": lr}
