"""A steering edit against a reference on held-out prompts, as the steering evaluation scripts report it.

Target and negative continuations: teacher-forced log-probs (summed over their tokens) with the reference's
interventions attached and with the edit's; control prompts: KL(P_ref ‖ P_steered) of the next-token
distribution after each prompt and its mean over all the prompt's positions. Each summary figure is a mean
over prompts with a 95 % t interval across them (:func:`geosteer_paper.stats.mean_ci`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from geosteer.interventions import steer
from geosteer.train.objective import forward_logits
from geosteer.train.prompts import (
    Batch,
    control_logprobs,
    encode_controls,
    encode_targets,
    read_controls,
    read_targets,
    target_logprob,
)
from geosteer_paper.stats import mean_ci


@dataclass(frozen=True)
class HeldOut:
    """Per-prompt values: log-probs (n,) of the targets and (m,) of the negatives under the reference
    (``ref_*``) and the edit; control KLs (c,) after each prompt (``kl_next``) and over its positions."""

    ref_target: torch.Tensor
    ref_negative: torch.Tensor
    target: torch.Tensor
    negative: torch.Tensor
    kl_next: torch.Tensor
    kl_all: torch.Tensor

    def summary(self, reference: str, margin: bool = False) -> dict:
        """The report's row: ``target_gain``, ``negative_drop`` (and ``margin_gain``, the gain of target −
        negative, with ``margin``), ``control_kl_next``, ``control_kl_all`` as mean and interval, and the
        reference's mean log-probs under ``<reference>_target_logprob`` / ``<reference>_negative_logprob``."""
        row = {"target_gain": mean_ci(self.target - self.ref_target),
               "negative_drop": mean_ci(self.ref_negative - self.negative)}
        if margin:
            row["margin_gain"] = mean_ci((self.target - self.negative) - (self.ref_target - self.ref_negative))
        row.update({"control_kl_next": mean_ci(self.kl_next), "control_kl_all": mean_ci(self.kl_all),
                    f"{reference}_target_logprob": float(self.ref_target.mean()),
                    f"{reference}_negative_logprob": float(self.ref_negative.mean())})
        return row


def _passes(model, tb: Batch, nb: Batch, cb: Batch, interventions: Sequence) -> tuple:
    with torch.no_grad(), steer(model, *interventions):
        return (target_logprob(forward_logits(model, tb), tb), target_logprob(forward_logits(model, nb), nb),
                control_logprobs(forward_logits(model, cb), cb))


def heldout_comparison(model, tok, reference: Sequence, steered: Sequence, targets: list[dict],
                       negatives: list[dict], controls: list[str]) -> HeldOut:
    """``steered`` (interventions) against ``reference`` (interventions; ``[]``: the stock model) on the
    prompt sets of ``geosteer.train.prompts`` (``read_targets`` / ``read_controls``)."""
    tb, nb, cb = encode_targets(tok, targets), encode_targets(tok, negatives), encode_controls(tok, controls)
    ref_t, ref_n, (ref_c, valid) = _passes(model, tb, nb, cb, reference)
    out_t, out_n, (out_c, _) = _passes(model, tb, nb, cb, steered)
    kl = (ref_c.exp() * (ref_c - out_c)).sum(-1)  # (c, T)
    kl_next = kl[torch.arange(kl.shape[0]), cb.lengths - 1]
    kl_all = (kl * valid).sum(-1) / valid.sum(-1)
    return HeldOut(ref_t, ref_n, out_t, out_n, kl_next, kl_all)


def add_prompt_options(ap: argparse.ArgumentParser) -> None:
    """The options every held-out evaluation script takes after its own: the prompt files (``--target``,
    ``--negative``, ``--controls``), ``--threads`` and ``--out``."""
    ap.add_argument("--target", required=True)
    ap.add_argument("--negative", required=True)
    ap.add_argument("--controls", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", required=True)


def read_prompt_sets(a: argparse.Namespace) -> tuple[list[dict], list[dict], list[str]]:
    """The target, negative and control prompts named by :func:`add_prompt_options`' options."""
    return read_targets(a.target), read_targets(a.negative), read_controls(a.controls)


def summary_line(name: str, row: dict) -> str:
    """One line for a summary row of :meth:`HeldOut.summary`, as the scripts print it."""
    return (f"{name}: target gain {row['target_gain']['mean']:.3f} nats, negative drop "
            f"{row['negative_drop']['mean']:.3f}, control KL next {row['control_kl_next']['mean']:.4f}, "
            f"all {row['control_kl_all']['mean']:.4f}")
