"""Experiment 3 as the paper runs it: diversity under aggregation pressure (paper §4 "FFN controls diversity
under aggregation pressure", Eq. (20)), and the FFN gain sweep by depth (App. C.1, Fig. 8 left).

Pressure. :class:`AttentionTemperature` multiplies the attention logits of the chosen layers by an inverse
temperature β_A (β_A > 1 sharpens every softmax row: stronger aggregation; β_A = 1 is stock). It is an
attention handler (``call.scaling`` × β_A), so it acts inside the softmax on every family, GQA and masks
included. Under each β_A, the FFN of the same layers runs as one of the variants full / tangential /
radial / zero (:class:`geosteer.dynamics.variants.FFNVariant`), and the spherical diversity D = 1 − ‖E u‖²
of the residual directions after every block is recorded (per sequence, position 0 left out unless
``with_bos``), with the held-out loss. ``mode="gain"`` reads β_A instead as the attention *gain* of the
paper's Table 3 (x + β_A A, :class:`geosteer.dynamics.variants.Gains`): a second reading of "pressure".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from geosteer.attention import attach_handlers
from geosteer.dynamics import sphere
from geosteer.dynamics.parallel import mean_loss
from geosteer.dynamics.variants import FFNVariant, Gains
from geosteer.errors import GeosteerError
from geosteer.hooks import attach_hooks
from geosteer.models.anatomy import anatomy

PRESSURE_VARIANTS = ("full", "tangential", "radial", "zero")
PRESSURE_MODES = ("temperature", "gain")


def check_beta(beta: float) -> float:
    if not (math.isfinite(beta) and beta > 0):
        raise GeosteerError(f"attention inverse temperature beta must be finite and > 0 (got {beta})")
    return float(beta)


@dataclass
class AttentionTemperature:
    """Multiply the attention logits of ``layers`` (None = all) by ``beta`` (β_A, inverse temperature)."""

    beta: float = 1.0
    layers: Sequence[int] | None = None

    def __post_init__(self) -> None:
        check_beta(self.beta)

    def attach(self, model: nn.Module) -> Callable[[], None]:

        beta = float(self.beta)

        def handler(call, proceed):
            return proceed(call.with_(scaling=call.effective_scaling * beta))

        return attach_handlers(model, self.layers, lambda layer: handler)


class _DiversityRecorder:
    """Read-only: D of the block outputs' directions per layer, summed over sequences."""

    def __init__(self, with_bos: bool) -> None:
        self.with_bos = with_bos
        self.sums: dict[int, list[float]] = {}

    def attach(self, model: nn.Module) -> Callable[[], None]:

        def rec(x, ctx):
            u = sphere.unit((x if self.with_bos else x[:, 1:]).float())
            d = sphere.diversity(u)
            acc = self.sums.setdefault(ctx.layer, [0.0, 0])
            acc[0] += float(d.sum())
            acc[1] += int(d.numel())

        return attach_hooks(model, "resid_post", None, rec)


@torch.no_grad()
def pressure_study(model: nn.Module, ids: torch.Tensor, betas: Sequence[float], layers: Sequence[int] | None,
                   variants: Sequence[str] = PRESSURE_VARIANTS, batch_size: int = 4, with_bos: bool = False,
                   mode: str = "temperature", log=None) -> tuple[list[dict], list[dict]]:
    """D after every block and the loss, for each (β_A, FFN variant) applied at ``layers``.

    Returns (per-layer rows, summary rows). Summary: loss, D after the last pressured layer and after the last
    layer, and the mean D over the layers from the first pressured one on.
    """

    if mode not in PRESSURE_MODES:
        raise GeosteerError(f"unknown pressure mode '{mode}'; valid: {', '.join(PRESSURE_MODES)}")
    an = anatomy(model)
    chosen = an.check_layers(layers)
    betas = [check_beta(b) for b in betas]
    bad = [v for v in variants if v not in PRESSURE_VARIANTS]
    if bad:
        raise GeosteerError(f"unknown FFN variant '{bad[0]}'; valid: {', '.join(PRESSURE_VARIANTS)}")
    rows, summ = [], []
    first, last = min(chosen), max(chosen)
    for beta in betas:
        for variant in variants:
            rec = _DiversityRecorder(with_bos)
            press = AttentionTemperature(beta, chosen) if mode == "temperature" else Gains(beta, 1.0, chosen)
            loss = mean_loss(model, ids, batch_size, (press, FFNVariant(variant, chosen), rec))
            per_layer = {k: v[0] / v[1] for k, v in sorted(rec.sums.items())}
            rows += [{"mode": mode, "beta": beta, "variant": variant, "layer": k, "diversity": v}
                     for k, v in per_layer.items()]
            after = [per_layer[k] for k in per_layer if k >= first]
            summ.append({"mode": mode, "beta": beta, "variant": variant, "loss": loss,
                         "D_last_pressured": per_layer[last], "D_final": per_layer[an.n_layers - 1],
                         "D_mean_from_first": sum(after) / len(after)})
            if log:
                log(f"beta={beta} {variant}: loss {loss:.3f}, D_final {per_layer[an.n_layers - 1]:.3f}")
    return rows, summ


def depth_layers(n_layers: int, depths: Sequence[float]) -> list[int]:
    """Layer round(f·(L − 1)) for each depth fraction f = ℓ/L in [0, 1]."""
    bad = [f for f in depths if not (math.isfinite(f) and 0 <= f <= 1)]
    if bad:
        raise GeosteerError(f"depth fractions must be in [0, 1] (got {bad[0]})")
    return [int(round(f * (n_layers - 1))) for f in depths]


def gain_depth_sweep(model: nn.Module, ids: torch.Tensor, depths: Sequence[float], values: Sequence[float],
                     batch_size: int = 4, log=None) -> list[dict]:
    """FFN gain α_F at a single layer at depth ℓ/L (attention fixed, App. C.1 / Fig. 8 left): loss increase."""

    L = anatomy(model).n_layers
    bad = [v for v in values if not math.isfinite(v)]
    if bad:
        raise GeosteerError(f"gain values must be finite (got {bad[0]})")
    base = mean_loss(model, ids, batch_size)
    rows = []
    for f, layer in zip(depths, depth_layers(L, depths), strict=True):
        for v in values:
            loss = base if v == 1.0 else mean_loss(model, ids, batch_size, (Gains(alpha_ffn=v, layers=[layer]),))
            rows.append({"depth": f, "layer": layer, "alpha_ffn": v, "loss": loss, "loss_increase": loss - base})
            if log:
                log(f"depth {f:.3f} (layer {layer}) alpha {v}: dL {loss - base:+.4f}")
    return rows
