"""Candidate channels for learned walls: contrastive attribution patching (see ``wall_learn``, stage 1).

One forward/backward per prompt set gives ∂ℓ/∂o for every attention output o_{i,h,d} of the candidate layers
(a zero leaf added to each output); zeroing channel (l, h, d) changes the objective by ≈ −Σ_i g_id o_id.
"""

from __future__ import annotations

import math

import torch

from geosteer.attention import attach_handlers
from geosteer.errors import GeosteerError
from geosteer.interventions import steer
from geosteer.manifold.wall_learn import Batch, WallLearnConfig, target_logprob
from geosteer.models.loading import input_device


class _Probe:
    """Adds a zero leaf to each attention output (so ∂ℓ/∂o is its gradient) and records q, k, o."""

    def __init__(self, layers: list[int]) -> None:
        self.layers = layers
        self.z: dict[int, torch.Tensor] = {}
        self.o: dict[int, torch.Tensor] = {}
        self.q: dict[int, torch.Tensor] = {}
        self.k: dict[int, torch.Tensor] = {}

    def attach(self, model):

        def make(layer):
            def handler(call, proceed):
                out, w = proceed(call)
                z = torch.zeros_like(out, requires_grad=True)
                self.z[layer], self.o[layer] = z, out.detach()
                rep = call.query.shape[1] // call.key.shape[1]
                self.q[layer] = call.query.detach()
                self.k[layer] = call.key.detach().repeat_interleave(rep, dim=1)
                return out + z, w

            return handler

        return attach_handlers(model, self.layers, make)


def _attribution(model, bank, batch: Batch, layers, objective) -> tuple[_Probe, torch.Tensor]:
    """Per-sample first-order change of ``objective`` (n,) when each channel is zeroed: (n, layers, H, d)."""

    probe = _Probe(layers)
    with torch.enable_grad(), steer(model, probe, bank):
        logits = model(input_ids=batch.ids.to(input_device(model)), use_cache=False).logits
        val = objective(logits)
        val.sum().backward()
    eff = torch.stack([(probe.z[x].grad * probe.o[x]).sum(1) for x in layers], 1)  # (n, layers, H, d)
    return probe, eff.float().cpu()


def score_candidates(model, tok, bank, tb: Batch, cb: Batch, cfg: WallLearnConfig, layers: list[int]) -> list[dict]:
    """Top ``cfg.candidates`` channels by contrastive attribution, each with a starting box (module docstring)."""

    dev = input_device(model)
    probe, t_eff = _attribution(model, bank, tb, layers, lambda lg: target_logprob(lg, tb))
    with torch.no_grad():
        from geosteer.interventions import steer

        with steer(model, bank):
            ref = model(input_ids=cb.ids.to(dev), use_cache=False).logits
        top = ref.argmax(-1)
    valid = (torch.arange(cb.ids.shape[1])[None] < cb.lengths[:, None]).to(dev)

    def ctrl(lg):
        lp = torch.log_softmax(lg.float(), -1).gather(-1, top.unsqueeze(-1)).squeeze(-1)
        return (lp * valid).sum(-1)

    _, c_eff = _attribution(model, bank, cb, layers, ctrl)
    drop = t_eff.mean(0)  # zeroing a channel lowers the target log-prob by ≈ Σ g·o
    collateral = c_eff.abs().mean(0)
    score = drop - cfg.control_weight * collateral
    score = torch.where(drop > 0, score, torch.full_like(score, -math.inf))
    n = min(cfg.candidates, int(torch.isfinite(score).sum()))
    if n == 0:
        raise GeosteerError("no channel lowers the target log-prob to first order; nothing to learn")
    vals, flat = score.flatten().topk(n)
    real = torch.arange(tb.ids.shape[1])[None] < tb.lengths[:, None]
    H, d = score.shape[1], score.shape[2]
    qlo, qhi = cfg.quantiles
    out = []
    for v, f in zip(vals.tolist(), flat.tolist(), strict=True):
        li, h, dd = f // (H * d), (f // d) % H, f % d
        layer = layers[li]
        qs = probe.q[layer][:, h, :, dd].cpu()[real].double()
        ks = probe.k[layer][:, h, :, dd].cpu()[real].double()
        out.append({"layer": layer, "head": h, "dim": dd, "score": v, "drop": float(drop[li, h, dd]),
                    "collateral": float(collateral[li, h, dd]),
                    "q": [float(torch.quantile(qs, qlo)), float(torch.quantile(qs, qhi))],
                    "k": [float(torch.quantile(ks, qlo)), float(torch.quantile(ks, qhi))],
                    "q_scale": max(float(qs.std()), 1e-3), "k_scale": max(float(ks.std()), 1e-3)})
    for c in out:  # a degenerate box (all values equal) gets one spread of room
        for ax in ("q", "k"):
            if not c[ax][0] < c[ax][1]:
                c[ax] = [c[ax][0] - c[f"{ax}_scale"], c[ax][1] + c[f"{ax}_scale"]]
    return out
