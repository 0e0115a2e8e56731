"""The steering frontier: target shift vs side effects for one behaviour, per lever and strength.

A :class:`Behaviour` is a set of held-out target continuations to promote (``direction=+1``) or suppress
(``-1``), optional negative continuations, and control prompts. Every point is measured against one
reference (the surfaces the study starts from, attached unedited, or the stock model when there are none):

- target shift: ``direction`` × the change of the target continuation's teacher-forced log-prob (summed
  over its tokens), per held-out prompt; mean and a 95 % percentile bootstrap interval over prompts;
- control KL: next-token KL(P_ref ‖ P_point) after each held-out control prompt (and over all its
  positions); mean and bootstrap interval;
- held-out perplexity of the bundled corpus (non-overlapping windows) and its ratio to the reference's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from geosteer.interventions import steer
from geosteer.manifold.wall_learn import (
    Batch,
    control_logprobs,
    encode_controls,
    encode_targets,
    target_logprob,
)

RECORD_FIELDS = (
    "behaviour", "lever", "setting", "strength", "layer",
    "target_shift", "target_shift_lo", "target_shift_hi",
    "negative_logprob_change", "control_kl", "control_kl_lo", "control_kl_hi", "control_kl_all_positions",
    "ppl", "ppl_ratio", "n_target", "n_control",
)


@dataclass
class Behaviour:
    """Prompts of one behaviour: ``train`` / ``heldout`` lists of ``{"prompt", "target"}``, the controls
    lists of prompts; ``direction`` +1 promotes the targets, -1 suppresses them."""

    name: str
    direction: int
    train: list[dict]
    heldout: list[dict]
    controls_train: list[str]
    controls_heldout: list[str]
    negatives_train: list[dict] | None = None
    negatives_heldout: list[dict] | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if self.direction not in (1, -1):
            raise ValueError(f"direction must be +1 (promote) or -1 (suppress), got {self.direction}")
        for name in ("train", "heldout", "controls_train", "controls_heldout"):
            if not getattr(self, name):
                raise ValueError(f"behaviour {self.name}: {name} is empty")


def bootstrap_ci(x: Sequence[float] | torch.Tensor, n_boot: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95 % percentile bootstrap interval of the mean of ``x`` (resampling its items, seeded)."""
    a = np.asarray(torch.as_tensor(x).double().cpu().numpy() if isinstance(x, torch.Tensor) else x, dtype=float)
    if a.size < 2:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    means = a[rng.integers(0, a.size, size=(n_boot, a.size))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(lo), float(hi)


@dataclass
class HeldOut:
    """The encoded held-out prompts of a behaviour and the perplexity slice."""

    targets: Batch
    negatives: Batch | None
    controls: Batch
    ppl_ids: torch.Tensor
    ppl_context: int


def encode_heldout(tok, b: Behaviour, ppl_ids: torch.Tensor, ppl_context: int) -> HeldOut:
    return HeldOut(encode_targets(tok, b.heldout),
                   encode_targets(tok, b.negatives_heldout) if b.negatives_heldout else None,
                   encode_controls(tok, b.controls_heldout), ppl_ids, ppl_context)


def _logits(model, batch: Batch) -> torch.Tensor:
    return model(input_ids=batch.ids, use_cache=False).logits


@torch.no_grad()
def window_nll(model, ids: torch.Tensor, context: int) -> tuple[float, int]:
    """Summed next-token NLL and token count over non-overlapping windows of ``context`` tokens."""
    total, count = 0.0, 0
    for start in range(0, ids.numel() - 1, context):
        w = ids[start:start + context + 1]
        if w.numel() < 2:
            break
        logits = model(input_ids=w[None, :-1], use_cache=False).logits[0].double()
        total += float(torch.nn.functional.cross_entropy(logits, w[1:], reduction="sum"))
        count += w.numel() - 1
    return total, count


@torch.no_grad()
def raw_outputs(model, data: HeldOut, interventions: Sequence) -> dict:
    """Per-prompt values of one condition (the interventions attached)."""
    with steer(model, *interventions):
        tlp = target_logprob(_logits(model, data.targets), data.targets)
        nlp = target_logprob(_logits(model, data.negatives), data.negatives) if data.negatives is not None else None
        clp, valid = control_logprobs(_logits(model, data.controls), data.controls)
        nll, count = window_nll(model, data.ppl_ids, data.ppl_context) if data.ppl_ids.numel() > 1 else (0.0, 0)
    return {"tlp": tlp, "nlp": nlp, "clp": clp, "valid": valid, "nll": nll, "count": count}


def compare(ref: dict, out: dict, data: HeldOut, direction: int, seed: int = 0) -> dict:
    """The metrics of a condition's raw outputs against the reference's (field names of RECORD_FIELDS)."""
    shift = direction * (out["tlp"] - ref["tlp"])
    kl = (ref["clp"].exp() * (ref["clp"] - out["clp"])).sum(-1)  # (n, T)
    kl = torch.where(ref["valid"].bool(), kl, torch.zeros_like(kl))
    lengths = data.controls.lengths
    kl_last = kl[torch.arange(kl.shape[0]), lengths - 1]
    kl_all = kl.sum(-1) / ref["valid"].sum(-1)
    lo, hi = bootstrap_ci(shift, seed=seed)
    klo, khi = bootstrap_ci(kl_last, seed=seed)
    ppl = math.exp(out["nll"] / out["count"]) if out["count"] else math.nan
    ppl_ref = math.exp(ref["nll"] / ref["count"]) if ref["count"] else math.nan
    neg = float((out["nlp"] - ref["nlp"]).mean()) if out["nlp"] is not None else None
    return {"target_shift": float(shift.mean()), "target_shift_lo": lo, "target_shift_hi": hi,
            "negative_logprob_change": neg, "control_kl": float(kl_last.mean()), "control_kl_lo": klo,
            "control_kl_hi": khi, "control_kl_all_positions": float(kl_all.mean()), "ppl": ppl,
            "ppl_ratio": ppl / ppl_ref if ppl_ref == ppl_ref and ppl_ref > 0 else math.nan,
            "n_target": int(shift.numel()), "n_control": int(kl_last.numel())}


def interpolate_at(points: list[tuple[float, float]], kl: float) -> float | None:
    """Shift of a lever's strength path (``(kl, shift)`` from its neutral point on, in strength order) at
    control KL ``kl``: linear between the two path points that bracket it; None past the path's largest KL."""
    path = [(0.0, 0.0), *points]
    best = None
    for (k0, s0), (k1, s1) in zip(path, path[1:], strict=False):
        if min(k0, k1) <= kl <= max(k0, k1):
            s = s0 if k1 == k0 else s0 + (s1 - s0) * (kl - k0) / (k1 - k0)
            best = s if best is None else max(best, s)
    return best


def matched_kl(records: list[dict], lever: str, baseline: str = "CAA") -> list[dict]:
    """Each ``lever`` point beside the baseline's best shift at the same control KL: the best of its
    points at or below that KL, and the best per-layer strength path interpolated at it."""
    base = [r for r in records if r["lever"] == baseline]
    paths: dict = {}
    for r in sorted(base, key=lambda r: r["strength"]):
        paths.setdefault(r.get("layer"), []).append((r["control_kl"], r["target_shift"]))
    out = []
    for r in (r for r in records if r["lever"] == lever):
        below = [b["target_shift"] for b in base if b["control_kl"] <= r["control_kl"]]
        interp = [s for p in paths.values() if (s := interpolate_at(p, r["control_kl"])) is not None]
        best_below = max(below) if below else 0.0
        best_interp = max(interp) if interp else None
        ref_best = max(best_below, best_interp) if best_interp is not None else best_below
        out.append({"behaviour": r["behaviour"], "lever": lever, "setting": r["setting"],
                    "control_kl": r["control_kl"], "target_shift": r["target_shift"],
                    "target_shift_lo": r["target_shift_lo"], "target_shift_hi": r["target_shift_hi"],
                    f"{baseline}_best_at_or_below": best_below, f"{baseline}_interpolated": best_interp,
                    "ahead": r["target_shift"] >= ref_best, "ahead_by_interval": r["target_shift_lo"] > ref_best})
    return out
