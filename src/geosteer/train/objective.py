"""Loss functions of the training loop: ``loss(model, batch) -> (scalar loss, {name: logged number})``.

:func:`lm_loss` is the default (next-token cross-entropy on token windows). :class:`PromptObjective` is the
behaviour objective on prompt sets (:mod:`geosteer.train.prompts`): it suppresses the target continuations
(``promote=False``: loss = mean target log-prob) or promotes them (``promote=True``: loss = −(mean target
log-prob − mean negative log-prob, when negatives are given)), plus the control-KL hinge
``kl_weight · [max(0, KL_next − τ) + max(0, KL_all − τ)]`` on the control prompts against the reference
distributions (KL_next: after each control prompt; KL_all: over all its positions), plus an optional
``penalty()`` (e.g. the gates' sparsity). It takes the :class:`geosteer.train.data.StepBatch` of
:class:`geosteer.train.data.FullBatch` (every step sees all prompts).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from geosteer.models.loading import input_device
from geosteer.train.prompts import Batch, control_kl, control_logprobs, target_logprob

LossFn = Callable[[nn.Module, Any], tuple[torch.Tensor, dict[str, float]]]


def lm_loss(model: nn.Module, batch: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
    """Mean next-token cross-entropy of the windows ``batch`` (b, T) (HF's shifted ``labels=`` loss)."""
    logits = model(input_ids=batch).logits
    return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), batch[:, 1:].flatten()), {}


def reverse_kl(logits: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """Mean over positions of KL(P_θ ‖ P_ref) = Σ_v p_θ(v) (log p_θ(v) − log p_ref(v)) for logits (..., V)."""
    lp, lr = F.log_softmax(logits.float(), -1), F.log_softmax(reference.float(), -1)
    return (lp.exp() * (lp - lr)).sum(-1).mean()


def lm_kl_loss(reference: Callable[[nn.Module, torch.Tensor], torch.Tensor], weight: float) -> LossFn:
    """Next-token cross-entropy plus ``weight`` × KL(P_θ ‖ P_ref) per position, P_ref the logits
    ``reference(model, batch)`` (computed without gradient, e.g. the stock model with the trained
    intervention switched off): the fluency term, which keeps the trained model's own predictions close to
    the reference where the text does not ask for a change."""

    def loss(model: nn.Module, batch: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        with torch.no_grad():
            ref = reference(model, batch)
        logits = model(input_ids=batch).logits
        ce = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), batch[:, 1:].flatten())
        kl = reverse_kl(logits[:, :-1], ref[:, :-1])
        return ce + weight * kl, {"ce": float(ce.detach()), "kl": float(kl.detach())}

    return loss


@dataclass
class PromptSets:
    """The token batches of one behaviour: targets, controls and (promote only) negatives."""

    targets: Batch
    controls: Batch
    negatives: Batch | None = None

    @property
    def tokens(self) -> int:
        """Real (unpadded) tokens in one pass over all the sets."""
        sets = [self.targets, self.controls] + ([self.negatives] if self.negatives is not None else [])
        return int(sum(int(b.lengths.sum()) for b in sets))

    def fingerprint(self, config: dict) -> str:
        """SHA-256 of the token ids (and targets) of every set and of ``config`` as sorted JSON: what a
        resumed run must find unchanged."""
        h = hashlib.sha256()
        for b in (self.targets, self.controls) + ((self.negatives,) if self.negatives is not None else ()):
            h.update(b.ids.numpy().tobytes())
            if b.target is not None:
                h.update(b.target.numpy().tobytes())
        h.update(json.dumps(config, sort_keys=True).encode())
        return h.hexdigest()


def forward_logits(model: nn.Module, batch: Batch) -> torch.Tensor:
    """The model's logits on a prompt batch (ids on the model's input device, no KV cache)."""

    return model(input_ids=batch.ids.to(input_device(model)), use_cache=False).logits


def objective_terms(model: nn.Module, sets: PromptSets, reference: torch.Tensor) -> dict:
    """Target log-prob (n,), control KL against ``reference`` (the control log-probs of the reference model)
    over all positions and at the last position (scalars); with negatives also their log-prob (m,)."""
    tlp = target_logprob(forward_logits(model, sets.targets), sets.targets)
    lp, valid = control_logprobs(forward_logits(model, sets.controls), sets.controls)
    terms = {"target_logprob": tlp, "kl": control_kl(reference, lp, valid),
             "kl_last": control_kl(reference, lp, valid, last_only=True, lengths=sets.controls.lengths)}
    if sets.negatives is not None:
        terms["negative_logprob"] = target_logprob(forward_logits(model, sets.negatives), sets.negatives)
    return terms


def signed_objective(terms: dict, promote: bool) -> torch.Tensor:
    """The target term of the loss: mean target log-prob (suppress), or −(mean target log-prob − mean
    negative log-prob, when negatives are given) (promote)."""
    tlp = terms["target_logprob"].mean()
    if not promote:
        return tlp
    nlp = terms["negative_logprob"].mean() if "negative_logprob" in terms else tlp.new_zeros(())
    return -(tlp - nlp)


@dataclass
class PromptObjective:
    """The behaviour objective (module docstring) as a loss function of the training loop."""

    reference: torch.Tensor  # (n, T, V) control log-probs of the reference model
    promote: bool
    kl_threshold: float
    kl_weight: float
    penalty: Callable[[], torch.Tensor] | None = None

    def __call__(self, model: nn.Module, batch) -> tuple[torch.Tensor, dict[str, float]]:
        terms = objective_terms(model, batch.inputs, self.reference)
        tlp = terms["target_logprob"].mean()
        # both the next-token KL after each prompt and the KL over all its positions stay under τ
        hinge = self.kl_weight * (torch.relu(terms["kl_last"] - self.kl_threshold)
                                  + torch.relu(terms["kl"] - self.kl_threshold))
        extra = self.penalty() if self.penalty is not None else tlp.new_zeros(())
        loss = signed_objective(terms, self.promote) + hinge + extra
        logged = {"target_logprob": float(tlp.detach()), "kl": float(terms["kl"].detach()),
                  "kl_last": float(terms["kl_last"].detach())}
        if "negative_logprob" in terms:
            logged["negative_logprob"] = float(terms["negative_logprob"].detach().mean())
        return loss, logged
