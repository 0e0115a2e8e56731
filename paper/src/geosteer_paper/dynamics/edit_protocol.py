"""The paper's App. C edit protocol: edit transfer, editing efficiency and locality, FFN-channel ablation.

Per layer ℓ and prompt (a held-out window; edit target t = its stock rank-``target_rank`` next token), the
weight edits of :mod:`geosteer_paper.dynamics.weight_edits` at every edit size s (= ‖ΔW‖_F, so every site is
compared at equal edit norm):

- ``dz`` = z_t(edited) − z_t(stock) at the prompt's last position (the target-logit change);
- transfer: the least-squares line dz ≈ a + b·s over the sizes: R² and the sign of b;
- efficiency = dz / s at the smallest s (target-logit change per unit edit norm);
- locality: ``kl_heldout`` = KL(stock ‖ edited) of the next token, mean over every position of held-out
  windows that are not the prompts (a weight edit acts on every input); ``kl_own`` at the prompt itself.

Channel ablation: the k down-projection channels chosen by ``channel_rule`` for the ablation target
(rank ``ablate_rank``, 0 = the model's own next token) removed at every position, vs k random channels
(``numpy.random.default_rng(seed)``, mean over the seeds): ``dz`` of that target and ``kl_heldout``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from geosteer.errors import GeosteerError
from geosteer.interventions import steer
from geosteer.models.anatomy import anatomy
from geosteer.models.loading import input_device
from geosteer_paper.dynamics import weight_edits as we
from geosteer_paper.dynamics.editing import line_fit
from geosteer_paper.dynamics.prefix import DIRECTIONS


@dataclass(frozen=True)
class ProtocolConfig:
    """The protocol's controls (defaults: the paper's Table 3 / App. C "Final hyperparameters")."""

    sizes: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0)
    neurons: int = 32
    neuron_rule: str = "activation"
    ks: tuple[int, ...] = (32, 128, 512)
    channel_rule: str = "attribution"
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    sites: tuple[str, ...] = we.PAPER_SITES
    direction: str = "unembed"
    target_rank: int = 10
    ablate_rank: int = 0

    def check(self, d_ff: int | None = None) -> ProtocolConfig:
        """Refuse bad controls in one line; ``d_ff`` (the FFN width) bounds ``neurons`` and ``ks``."""
        checks = ((self.neuron_rule, we.NEURON_RULES, "neuron rule (--neuron-rule)"),
                  (self.channel_rule, we.CHANNEL_RULES, "channel rule (--channel-rule)"),
                  (self.direction, DIRECTIONS, "edit direction (--direction)"),
                  *((s, we.SITES, "edit site (--sites)") for s in self.sites))
        for value, valid, what in checks:
            if value not in valid:
                raise GeosteerError(f"unknown {what} '{value}'; valid: {', '.join(valid)}")
        if len(self.sizes) < 2 or len(set(self.sizes)) < len(self.sizes) or \
                not all(math.isfinite(s) and s > 0 for s in self.sizes):
            raise GeosteerError(f"edit sizes must be >= 2 different finite numbers > 0 (got {list(self.sizes)})")
        for name, values in (("--neurons", [self.neurons]), ("--ks", list(self.ks))):
            if not values or any(int(v) != v or v < 1 for v in values):
                raise GeosteerError(f"{name} must be integers >= 1 (got {values})")
            if d_ff is not None and max(values) > d_ff:
                raise GeosteerError(f"{name} {max(values)} exceeds the FFN width {d_ff} of this model")
        if not self.sites:
            raise GeosteerError(f"--sites is empty; valid: {', '.join(we.SITES)}")
        if not self.seeds:
            raise GeosteerError("--seeds must be >= 1 (the random baselines need seeds)")
        if min(self.target_rank, self.ablate_rank) < 0:
            raise GeosteerError("target ranks must be >= 0 (0 = the top next token)")
        return self

    @property
    def mid(self) -> float:
        """The mid-range edit size (the paper's headline size)."""
        return sorted(self.sizes)[len(self.sizes) // 2]


def unembedding(model: nn.Module, direction: str) -> torch.Tensor:
    """W_U rows (V, d) float64, centred over the vocabulary for ``centered``."""
    w_u = model.get_output_embeddings().weight.detach().double().cpu()
    return w_u - w_u.mean(0, keepdim=True) if direction == "centered" else w_u


@torch.no_grad()
def _outcome(model: nn.Module, iv, prompts: torch.Tensor, heldout: torch.Tensor, stock_last: torch.Tensor,
             stock_held: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per prompt b under its edit: dz and dlogp of targets[b], kl_own, kl_heldout (mean over positions)."""

    dev, b = input_device(model), prompts.shape[0]
    with steer(model, iv):
        last = model(prompts.to(dev), logits_to_keep=1).logits[:, -1].double().cpu()
        held = model(heldout.repeat(b, 1).to(dev)).logits.double().cpu().log_softmax(-1)
    rows = torch.arange(b)
    lp0, lp1 = stock_last.log_softmax(-1), last.log_softmax(-1)
    held = held.view(b, -1, held.shape[-1])
    ref = stock_held.reshape(1, -1, stock_held.shape[-1])
    return {"dz": last[rows, targets] - stock_last[rows, targets],
            "dlogp": lp1[rows, targets] - lp0[rows, targets],
            "kl_own": (lp0.exp() * (lp0 - lp1)).sum(-1),
            "kl_heldout": (ref.exp() * (ref - held)).sum(-1).mean(-1)}


def _records(base: dict, out: dict[str, torch.Tensor], targets: torch.Tensor) -> list[dict]:
    return [{**base, "prompt": b, "target": int(targets[b]), **{k: float(v[b]) for k, v in out.items()}}
            for b in range(targets.shape[0])]


def _edit_rows(model, layer, probe, targets, prompts, heldout, stock_held, cfg: ProtocolConfig, w_u,
               cov: torch.Tensor | None = None) -> list[dict]:
    w_down = we.site_linear(model, layer, "value").weight.detach().double().cpu()
    u_t = w_u[targets]
    neurons = we.value_neurons(probe.act[:, -1], w_down, u_t, cfg.neurons, cfg.neuron_rule)
    plans = [(s, -1, u_t) for s in cfg.sites if s != "random"]
    if "random" in cfg.sites:
        plans += [("random", seed, torch.from_numpy(np.random.default_rng(seed).standard_normal(tuple(u_t.shape))))
                  for seed in cfg.seeds]
    rows = []
    for site, seed, direction in plans:
        unit = we.unit_deltas(probe, "value" if site == "random" else site, direction, neurons, cov)
        for s in cfg.sizes:
            out = _outcome(model, we.GroupedWeightDelta(layer, site, s * unit), prompts, heldout, probe.logits,
                           stock_held, targets)
            rows += _records({"layer": layer, "site": site, "seed": seed, "size": s, "edit_norm": s}, out, targets)
    return rows


def _ablation_rows(model, layer, probe, targets, prompts, heldout, stock_held, cfg: ProtocolConfig) -> list[dict]:
    w_down = we.site_linear(model, layer, "value").weight.detach().double().cpu()
    rows = []
    for k in cfg.ks:
        picks = [("top", -1, we.ablation_channels(probe, k, cfg.channel_rule))]
        picks += [("random", seed, we.random_channels(seed, prompts.shape[0], w_down.shape[1], k))
                  for seed in cfg.seeds]
        for selection, seed, channels in picks:
            deltas = we.ablation_deltas(w_down, channels)
            out = _outcome(model, we.GroupedWeightDelta(layer, "ablation", deltas), prompts, heldout,
                           probe.logits, stock_held, targets)
            out["delta_norm"] = deltas.flatten(1).norm(dim=-1)
            rows += _records({"layer": layer, "k": k, "selection": selection, "seed": seed}, out, targets)
    return rows


def transfer(edits: list[dict], sizes: Sequence[float]) -> list[dict]:
    """Per (layer, site, seed, prompt): the line dz ≈ a + b·s (slope, R²), efficiency = dz/s at the
    smallest s, and the KLs at the mid-range size."""
    sizes = sorted(sizes)
    mid = sizes[len(sizes) // 2]
    by: dict[tuple, dict[float, dict]] = {}
    for r in edits:
        by.setdefault((r["layer"], r["site"], r["seed"], r["prompt"]), {})[r["size"]] = r
    out = []
    for (layer, site, seed, prompt), pts in by.items():
        slope, r2 = line_fit(np.array(sizes), np.array([pts[s]["dz"] for s in sizes]))
        out.append({"layer": layer, "site": site, "seed": seed, "prompt": prompt, "slope": slope, "r2": r2,
                    "efficiency": pts[sizes[0]]["dz"] / sizes[0], "dz_mid": pts[mid]["dz"],
                    "kl_heldout_min": pts[sizes[0]]["kl_heldout"], "kl_heldout_mid": pts[mid]["kl_heldout"],
                    "kl_own_mid": pts[mid]["kl_own"]})
    return out


_TRANSFER_MEANS = ("efficiency", "r2", "dz_mid", "kl_heldout_min", "kl_heldout_mid", "kl_own_mid")


def _mean_by(rows: list[dict], keys: tuple[str, ...], fields: Sequence[str]) -> list[dict]:
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    return [{**dict(zip(keys, key, strict=True)), "n": len(sel),
             **{f: float(np.nanmean([r[f] for r in sel])) for f in fields}} for key, sel in groups.items()]


def summarise(fits: list[dict], ablation: list[dict]) -> dict[str, list[dict]]:
    """Means per (layer, site) and per site over layers (random: over seeds and prompts); the ablation
    means per (layer, k, selection) and per (k, selection) over layers."""
    for f in fits:
        f["slope_positive"] = float(f["slope"] > 0)
    fields = (*_TRANSFER_MEANS, "slope_positive")
    summary = _mean_by(fits, ("layer", "site"), fields)
    overall = _mean_by(summary, ("site",), fields)
    abl = _mean_by(ablation, ("layer", "k", "selection"), ("dz", "dlogp", "kl_heldout", "kl_own", "delta_norm"))
    abl_overall = _mean_by(abl, ("k", "selection"), ("dz", "dlogp", "kl_heldout", "kl_own"))
    for f in fits:
        del f["slope_positive"]
    return {"summary": summary, "overall": overall, "ablation_summary": abl, "ablation_overall": abl_overall}


def stock_heldout(model: nn.Module, heldout: torch.Tensor) -> torch.Tensor:
    """Stock next-token log-probabilities at every held-out position (H, T, V), float64."""

    with torch.no_grad():
        return model(heldout.to(input_device(model))).logits.double().cpu().log_softmax(-1)


def edit_protocol(model: nn.Module, prompts: torch.Tensor, heldout: torch.Tensor, layers: Sequence[int],
                  cfg: ProtocolConfig = ProtocolConfig(), done: dict | None = None,
                  on_layer=None, cov_windows: torch.Tensor | None = None) -> dict[str, list[dict]]:
    """The protocol on ``layers``: tables ``edits``, ``transfer``, ``summary``, ``overall``, ``ablation``,
    ``ablation_summary``, ``ablation_overall`` (tidy records). ``done`` maps a layer to its (edit rows,
    ablation rows) from an earlier run (not measured again); ``on_layer(layer, edit_rows, ablation_rows)``
    is called after each layer measured (a checkpoint). ``cov_windows``: the text the ``rome`` site's key
    second moment is estimated on (needed with that site; other text than the prompts and held-out windows)."""

    layers = anatomy(model).check_layers(list(layers))
    d_ff = we.site_linear(model, layers[0], "value").in_features if layers else None
    cfg.check(d_ff)
    if "rome" in cfg.sites and cov_windows is None:
        raise GeosteerError("the rome site needs cov_windows (text for its key second moment)")
    for site in {*cfg.sites, "value"}:
        we.site_linear(model, layers[0], site)
    w_u = unembedding(model, cfg.direction)
    stock_held = stock_heldout(model, heldout)
    edits, ablation = [], []
    for layer in layers:
        if done and layer in done:
            e_rows, a_rows = done[layer]
        else:
            probe, t_edit, t_abl = we.probe_layer(model, prompts, layer, cfg.target_rank, cfg.ablate_rank)
            cov = we.key_second_moment(model, layer, cov_windows) if "rome" in cfg.sites else None
            e_rows = _edit_rows(model, layer, probe, t_edit, prompts, heldout, stock_held, cfg, w_u, cov)
            a_rows = _ablation_rows(model, layer, probe, t_abl, prompts, heldout, stock_held, cfg)
            if on_layer is not None:
                on_layer(layer, e_rows, a_rows)
        edits += e_rows
        ablation += a_rows
    fits = transfer(edits, cfg.sizes)
    return {"edits": edits, "transfer": fits, "ablation": ablation, **summarise(fits, ablation)}
