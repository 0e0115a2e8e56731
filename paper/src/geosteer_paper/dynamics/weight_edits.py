"""Weight edits of one linear module per layer, one edit per group of batch rows (paper App. C edit protocol).

An edit is ΔW on the weight of one ``nn.Linear`` of block ℓ, at one of these sites:

- ``value`` / ``random``: the FFN down projection (the value path). The edit writes a unit direction û into
  the value vectors of n neurons S: ΔW = s·û ŵᵀ with ŵ = a_S/‖a_S‖, a = the down projection's input at the
  prompt's last position (zero outside S). ‖ΔW‖_F = s and the down projection's output there moves by
  s‖a_S‖·û. ``value``: û = the target's unembedding row; ``random``: a Gaussian direction.
- ``attn_out``: the attention output projection, the same rank-one edit with ŵ = its whole input at the
  last position (every head's output: the broad attention-output edit).
- ``query`` / ``key``: the query / key projection, ΔW = s·G/‖G‖_F with G = ∂z_t/∂W (the steepest first-order
  ascent of the target logit z_t among edits of that norm).
- ``rome`` (a fine-tuning-free editing baseline, not in the paper's protocol): the down projection, ΔW = s·û ŵᵀ
  with ŵ = unit((C + λI)⁻¹ a), a = the down projection's whole input at the prompt's last position and
  C = E[k kᵀ] its second moment over other text (ROME's key whitening, Meng et al. 2022: the rank-one edit
  that moves the output at a by a given vector while changing it least on average over the keys C was
  estimated on). The value direction û and the size s are the protocol's (not an optimised value vector);
  λ = 1e-3 · tr(C)/m.
- channel ablation: ΔW = −W[:, S] on the down projection's columns S (channels S removed at every position).

:class:`GroupedWeightDelta` applies ΔW_g to the rows of group g as the hook ``out += x ΔW_gᵀ``; a test checks
it against editing the weight itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from geosteer.errors import GeosteerError
from geosteer.models.anatomy import anatomy
from geosteer.models.loading import input_device
from geosteer_paper.dynamics.editing import down_projection

SITES = ("value", "random", "query", "key", "attn_out", "rome")
PAPER_SITES = SITES[:5]  # the paper's protocol; ``rome`` is an added baseline
RIDGE = 1e-3  # λ of the rome edit, relative to the mean eigenvalue tr(C)/m
NEURON_RULES = ("activation", "alignment")
CHANNEL_RULES = ("attribution", "activation")
_ATTN_NAMES = {"query": "q_proj", "key": "k_proj", "attn_out": "o_proj"}


def site_linear(model: nn.Module, layer: int, site: str) -> nn.Linear:
    """The ``nn.Linear`` that an edit at ``site`` of ``layer`` changes."""
    if site not in SITES and site != "ablation":
        raise GeosteerError(f"unknown edit site '{site}'; valid: {', '.join(SITES)}")
    if site in _ATTN_NAMES:
        attn = anatomy(model).blocks[layer].attn
        mod = getattr(attn, _ATTN_NAMES[site], None)
        where = f"{type(attn).__name__}.{_ATTN_NAMES[site]}"
    else:
        mod = down_projection(model, layer)
        where = f"the down projection ({type(mod).__name__})"
    if not isinstance(mod, nn.Linear):
        raise GeosteerError(f"edit site '{site}' needs {where} to be a separate nn.Linear; this model "
                            "fuses or lacks it (families with q_proj/k_proj/o_proj/down_proj: llama, qwen2, "
                            "qwen3, mistral, gemma3)")
    return mod


class GroupedWeightDelta:
    """``module.weight += deltas[g]`` for the rows of group g: a batch of G·r rows is cut into G consecutive
    groups of r rows. ``deltas`` is (G, out, in)."""

    def __init__(self, layer: int, site: str, deltas: torch.Tensor) -> None:
        self.layer, self.site, self.deltas = layer, site, deltas

    def attach(self, model: nn.Module) -> Callable[[], None]:
        mod = site_linear(model, self.layer, self.site)
        delta = self.deltas.to(mod.weight.device, mod.weight.dtype)
        groups = delta.shape[0]

        def hook(m, args, out):
            x = args[0]
            if x.shape[0] % groups:
                raise GeosteerError(f"batch of {x.shape[0]} rows is not {groups} equal groups")
            xg = x.reshape(groups, -1, x.shape[-1])
            add = torch.einsum("gni,goi->gno", xg, delta)
            return out + add.reshape(out.shape)

        return mod.register_forward_hook(hook).remove


@dataclass
class LayerProbe:
    """The stock forward of the prompts at one layer: logits at the last position (B, V), the down
    projection's input (B, T, m) and its target-logit gradient (for the ablation target), the attention
    output projection's input at the last position (B, d_o), and ∂z_t/∂W of the query and key projections."""

    logits: torch.Tensor
    act: torch.Tensor
    act_grad: torch.Tensor
    attn_last: torch.Tensor
    weight_grads: dict[str, torch.Tensor]


def _leaf_adder(store: dict, name: str):
    """A forward hook adding a zero leaf to the output (its gradient is the output's)."""
    def hook(m, args, out):
        store[name] = torch.zeros_like(out, requires_grad=True)
        store[name + "_in"] = args[0].detach()
        return out + store[name]
    return hook


def probe_layer(model: nn.Module, ids: torch.Tensor, layer: int, edit_rank: int, ablate_rank: int
                ) -> tuple[LayerProbe, torch.Tensor, torch.Tensor]:
    """One stock forward + backward. Returns the probe, the edit targets (rank ``edit_rank`` of each prompt's
    stock next-token logits) and the ablation targets (rank ``ablate_rank``)."""

    store: dict[str, torch.Tensor] = {}
    down = site_linear(model, layer, "value")

    def pre(m, args):
        store["act_leaf"] = torch.zeros_like(args[0], requires_grad=True)
        store["act"] = args[0].detach()
        return (args[0] + store["act_leaf"],)

    handles = [site_linear(model, layer, s).register_forward_hook(_leaf_adder(store, s)) for s in ("query", "key")]
    handles.append(site_linear(model, layer, "attn_out").register_forward_pre_hook(
        lambda m, args: store.__setitem__("attn_in", args[0].detach())))
    handles.append(down.register_forward_pre_hook(pre))
    try:
        with torch.enable_grad():
            logits = model(ids.to(input_device(model))).logits[:, -1]
            if max(edit_rank, ablate_rank) >= logits.shape[-1]:
                raise GeosteerError(f"target rank {max(edit_rank, ablate_rank)} >= vocabulary size "
                                    f"{logits.shape[-1]}")
            order = logits.detach().argsort(-1, descending=True)
            rows = torch.arange(ids.shape[0])
            t_edit, t_abl = order[:, edit_rank], order[:, ablate_rank]
            gq, gk = torch.autograd.grad(logits[rows, t_edit].sum(), [store["query"], store["key"]],
                                         retain_graph=True)
            (ga,) = torch.autograd.grad(logits[rows, t_abl].sum(), [store["act_leaf"]])
    finally:
        for h in handles:
            h.remove()
    grads = {s: torch.einsum("bto,bti->boi", g.double(), store[s + "_in"].double()).cpu()
             for s, g in (("query", gq), ("key", gk))}
    probe = LayerProbe(logits.detach().double().cpu(), store["act"].double().cpu(), ga.double().cpu(),
                       store["attn_in"][:, -1].double().cpu(), grads)
    return probe, t_edit.cpu(), t_abl.cpu()


def value_neurons(act_last: torch.Tensor, w_down: torch.Tensor, u: torch.Tensor, n: int, rule: str) -> torch.Tensor:
    """The n value neurons of each prompt (B, n): ``activation``, the largest |a_j| at the last position;
    ``alignment``, the largest cosine of the value vector W_down[:, j] with the target direction u (B, d)."""
    if rule == "activation":
        score = act_last.abs()
    elif rule == "alignment":
        cols = w_down / w_down.norm(dim=0, keepdim=True).clamp_min(1e-30)
        score = (u / u.norm(dim=-1, keepdim=True)) @ cols
    else:
        raise GeosteerError(f"unknown neuron rule '{rule}'; valid: {', '.join(NEURON_RULES)}")
    return score.topk(n, dim=-1).indices


def rank_one_deltas(directions: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    """ΔW_b = û_b ŵ_bᵀ (B, out, in) of unit Frobenius norm, û = unit(directions), ŵ = unit(inputs)."""
    u = directions / directions.norm(dim=-1, keepdim=True)
    w = inputs / inputs.norm(dim=-1, keepdim=True).clamp_min(1e-30)
    return u[:, :, None] * w[:, None, :]


@torch.no_grad()
def key_second_moment(model: nn.Module, layer: int, ids: torch.Tensor, batch_size: int = 4) -> torch.Tensor:
    """C = E[k kᵀ] (m × m, float64) of the down projection's input k over every position of ``ids``."""

    down = site_linear(model, layer, "value")
    acc = {"c": torch.zeros(down.in_features, down.in_features, dtype=torch.float64), "n": 0}

    def pre(m, args):
        k = args[0].detach().reshape(-1, args[0].shape[-1]).double().cpu()
        acc["c"] += k.T @ k
        acc["n"] += k.shape[0]

    handle = down.register_forward_pre_hook(pre)
    try:
        for i in range(0, ids.shape[0], batch_size):
            model(ids[i:i + batch_size].to(input_device(model)), logits_to_keep=1)
    finally:
        handle.remove()
    return acc["c"] / max(acc["n"], 1)


def whitened_keys(keys: torch.Tensor, cov: torch.Tensor, ridge: float = RIDGE) -> torch.Tensor:
    """(C + λI)⁻¹ k for each row k of ``keys`` (B, m), λ = ``ridge`` · tr(C)/m."""
    lam = ridge * float(torch.diagonal(cov).mean())
    eye = torch.eye(cov.shape[0], dtype=cov.dtype)
    return torch.linalg.solve(cov + lam * eye, keys.T.to(cov.dtype)).T


def unit_deltas(probe: LayerProbe, site: str, directions: torch.Tensor, neurons: torch.Tensor,
                cov: torch.Tensor | None = None) -> torch.Tensor:
    """The site's edit of unit Frobenius norm per prompt (B, out, in); ``directions`` (B, d) is û for the
    rank-one sites, ``neurons`` (B, n) the value neurons, ``cov`` the key second moment (``rome``)."""
    if site == "rome":
        if cov is None:
            raise GeosteerError("the rome edit needs the key second moment C (key_second_moment)")
        return rank_one_deltas(directions, whitened_keys(probe.act[:, -1], cov))
    if site in ("query", "key"):
        g = probe.weight_grads[site]
        return g / g.flatten(1).norm(dim=-1).clamp_min(1e-30)[:, None, None]
    if site == "attn_out":
        return rank_one_deltas(directions, probe.attn_last)
    last = probe.act[:, -1]
    masked = torch.zeros_like(last).scatter(-1, neurons, last.gather(-1, neurons))
    return rank_one_deltas(directions, masked)


def ablation_channels(probe: LayerProbe, k: int, rule: str) -> torch.Tensor:
    """The k FFN channels of each prompt (B, k): ``attribution``, the largest first-order drop of the ablation
    target's logit when the channel is zeroed at every position, Σ_t a_j ∂z/∂a_j; ``activation``, the largest
    |a_j| at the last position."""
    if rule == "attribution":
        score = (probe.act * probe.act_grad).sum(1)
    elif rule == "activation":
        score = probe.act[:, -1].abs()
    else:
        raise GeosteerError(f"unknown channel rule '{rule}'; valid: {', '.join(CHANNEL_RULES)}")
    return score.topk(k, dim=-1).indices


def random_channels(seed: int, prompts: int, m: int, k: int) -> torch.Tensor:
    """k of m channels per prompt without replacement, from ``numpy.random.default_rng(seed)`` (B, k)."""
    rng = np.random.default_rng(seed)
    return torch.from_numpy(np.stack([rng.choice(m, size=k, replace=False) for _ in range(prompts)]))


def ablation_deltas(w_down: torch.Tensor, channels: torch.Tensor) -> torch.Tensor:
    """ΔW_b = −W_down on the columns ``channels[b]``, zero elsewhere (B, out, in)."""
    mask = torch.zeros(channels.shape[0], w_down.shape[1], dtype=w_down.dtype).scatter(
        -1, channels, torch.ones_like(channels, dtype=w_down.dtype))
    return -w_down[None] * mask[:, None, :]
