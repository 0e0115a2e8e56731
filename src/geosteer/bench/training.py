"""The one training objective of every learned lever, and the run of it on any trainable intervention.

Every learned lever (preference vector, LoReFT, LoRA, FFN gates, ∥/⊥ scales, steering surfaces; walls
only suppress) optimises :class:`geosteer.train.PromptObjective` with ``promote=True``: raise the summed
log-prob of the toward texts and lower that of the away texts, each as the answer to a generic request
(:func:`geosteer.bench.prompts.training_pairs`), plus the control-KL hinge (τ = ``setup.train_tau`` on the
neutral training controls, against the stock model), for the budget's number of full-batch AdamW steps at
the lever's learning rate. The levers differ in what they parametrise, not in what they are asked.

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
from geosteer.loreft import LoReFT
from geosteer.methods import save_artifact
from geosteer.vectors import TrainableVectors

KL_WEIGHT = 100.0


def prompt_sets(setup):
    """The encoded training sets (toward targets, controls, away negatives), BOS first."""
    from geosteer.bench.prompts import training_pairs
    from geosteer.train.objective import PromptSets
    from geosteer.train.prompts import encode_controls, encode_targets

    tok = setup.tok
    return PromptSets(encode_targets(tok, training_pairs(setup, setup.toward), True),
                      encode_controls(tok, setup.train_controls, True),
                      encode_targets(tok, training_pairs(setup, setup.away), True))


def fit_module(setup, module: nn.Module, lr: float, name: str) -> dict:
    """Train ``module`` (an intervention with ``attach``) on the shared objective with
    :func:`geosteer.train.fit`; returns the last step's logged numbers."""
    import hashlib

    import torch

    from geosteer.train import FullBatch, RunConfig, TrainConfig, fit
    from geosteer.train.objective import PromptObjective, forward_logits
    from geosteer.train.prompts import control_logprobs

    sets = prompt_sets(setup)
    with torch.no_grad():
        ref = control_logprobs(forward_logits(setup.model, sets.controls), sets.controls)[0]
    objective = PromptObjective(ref, True, setup.train_tau, KL_WEIGHT)
    steps = setup.budget.steps
    tcfg = TrainConfig(lr=lr, steps=steps, batch_size=1, seq_len=1, warmup_steps=0, min_lr_ratio=1.0,
                       grad_clip=1.0, seed=setup.seed, checkpoint_every=0, eval_before_after=False,
                       log_every=max(1, steps))
    digest = hashlib.sha256(b"".join(b.ids.numpy().tobytes() for b in (sets.targets, sets.controls,
                                                                         sets.negatives))).hexdigest()
    options = RunConfig(out_dir=None, progress=False, log=None, interventions=(module,), move_model=False,
                        record={"lever": name})
    res = fit(setup.model, module, tcfg, FullBatch(sets, digest, sets.tokens), loss=objective, options=options)
    module.requires_grad_(False)
    last = res.history[-1] if res.history else {}
    return {k: round(float(v), 5) for k, v in last.items() if isinstance(v, (int, float))}


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
    lo.meta = {"objective": "bench preference", "lr": lr, "train": last}
    return str(save_artifact(lo, _artifact_folder(setup, name))), {"train": last, "layers": lo.layers, "rank": rank,
                                                        "params": lo.n_parameters(), "lr": lr}
