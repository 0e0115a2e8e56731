"""The one training objective of every learned lever, and the run of it for the benchmark's own modules.

Every learned lever (preference vector, LoReFT, LoRA, FFN gates, ∥/⊥ scales, steering surfaces; walls
only suppress) optimises :class:`geosteer.train.PromptObjective` with ``promote=True``: raise the summed
log-prob of the toward texts and lower that of the away texts, each as the answer to a generic request
(:func:`geosteer.bench.prompts.training_pairs`), plus the control-KL hinge (τ = ``setup.train_tau`` on the
neutral training controls, against the stock model), for the budget's number of full-batch AdamW steps at
the lever's learning rate. The levers differ in what they parametrise, not in what they are asked.
"""

from __future__ import annotations

from torch import nn

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
