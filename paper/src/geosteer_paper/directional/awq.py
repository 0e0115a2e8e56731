"""AWQ (Lin et al., 2024): activation-aware per-channel scales and weight clipping, searched per block.

As in the reference code, for each block, with inputs from the *uncompressed* model:

- **Scale search.** The linears that read one input (q/k/v; gate/up) share a scale per input channel
  s = mean|x|^α / √(max·min) with α ∈ {0, 1/20, …, 19/20}; the candidate weights are Q(W·diag(s))·diag(s)⁻¹
  (``quant_grid``), and α is chosen to minimise the error of the module around them (the attention
  module for q/k/v, the MLP for gate/up) against its uncompressed output. The attention output and the
  MLP down projection get their own search on their own output; the attention output only where its
  scale folds into the value projection (one KV head per query head). The scales are kept in the weights
  (equal, in full precision, to folding diag(s)⁻¹ into the previous norm or linear).
- **Clip search.** For every linear but the query and key projections, each (output row, group) gets
  the clip range max|w|·(1 − i/20), i < 10, that minimises that group's output error on up to 512 input
  rows; weights are clamped to it before rounding.

``perp_weight`` w (beyond the paper) changes the scale search's objective to the module-output error with
its component perpendicular to the uncompressed output (the sublayer update Δ_base; Eqs. 1-2) weighted
by w relative to the parallel one: mean over tokens of (‖e‖² + (w − 1)‖e⊥‖²)/d. w = 1 is AWQ.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from geosteer.directional.decompose import decompose
from geosteer.models.anatomy import anatomy
from geosteer_paper.directional.block_capture import BlockCapture, block_captures, module_output
from geosteer_paper.directional.quant_grid import check_group, quantize_rtn

N_GRID = 20
CLIP_SKIP = ("q_", "k_", "query", "key")  # the reference code does not clip the q/k projections


def perp_weighted_error(out: torch.Tensor, ref: torch.Tensor, perp_weight: float = 1.0) -> torch.Tensor:
    """Mean over tokens of (‖e‖² + (w − 1)‖e⊥‖²) / d, e = out − ref, e⊥ ⊥ ref (w = 1: the mean squared error)."""
    e = (out - ref).float()
    per_token = (e * e).sum(-1)
    if perp_weight != 1.0:
        _, _, perp = decompose(e, ref.float())
        per_token = per_token + (perp_weight - 1.0) * (perp * perp).sum(-1)
    return per_token.mean() / e.shape[-1]


def scale_for(act_abs_mean: torch.Tensor, ratio: float) -> torch.Tensor:
    """AWQ's per-channel scale mean|x|^α, normalised by √(max·min)."""
    s = act_abs_mean.pow(ratio).clamp(min=1e-4)
    return s / (s.max() * s.min()).sqrt()


@torch.no_grad()
def search_scale(module: nn.Module, linears: Sequence[nn.Linear], act_abs_mean: torch.Tensor,
                 calls: Sequence[tuple[tuple, dict]], bits: int, group: int, perp_weight: float = 1.0,
                 n_grid: int = N_GRID) -> tuple[float, torch.Tensor, list[float]]:
    """(α, scales, loss per α) minimising the module-output error of Q(W·diag(s))·diag(s)⁻¹ on ``calls``."""
    refs = [module_output(module, c) for c in calls]
    originals = [lin.weight.data.clone() for lin in linears]
    history, best = [], None
    try:
        for k in range(n_grid):
            s = scale_for(act_abs_mean, k / n_grid)
            for lin, w0 in zip(linears, originals, strict=True):
                lin.weight.data = (quantize_rtn(w0.float() * s, bits, group) / s).to(w0.dtype)
            loss = sum(float(perp_weighted_error(module_output(module, c), r, perp_weight))
                       for c, r in zip(calls, refs, strict=True)) / len(calls)
            history.append(loss)
            if best is None or loss < best[0]:
                best = (loss, k / n_grid, s)
    finally:
        for lin, w0 in zip(linears, originals, strict=True):
            lin.weight.data = w0
    return best[1], best[2], history


@torch.no_grad()
def search_clip(w: torch.Tensor, x: torch.Tensor, bits: int, group: int, n_grid: int = N_GRID,
                max_shrink: float = 0.5, n_tokens: int = 512) -> torch.Tensor:
    """Per (output row, group) the clip bound max|w|·(1 − i/n_grid) minimising the group's output error;
    shaped (out, n_groups, 1)."""
    out_f, in_f = w.shape
    check_group(in_f, group)
    x = x.reshape(-1, in_f)
    x = x[::max(1, x.shape[0] // n_tokens)].reshape(-1, in_f // group, group)  # (tokens, groups, group)
    wg = w.reshape(out_f, in_f // group, group)
    ref = torch.einsum("tgk,rgk->rtg", x, wg)
    org_max = wg.abs().amax(-1, keepdim=True)
    best, best_err = org_max.clone(), torch.full_like(org_max, float("inf"))
    for i in range(int(max_shrink * n_grid)):
        bound = org_max * (1 - i / n_grid)
        q = quantize_rtn(torch.maximum(torch.minimum(wg, bound), -bound).reshape(out_f, in_f), bits, group)
        err = ((torch.einsum("tgk,rgk->rtg", x, q.reshape(wg.shape)) - ref) ** 2).mean(1)[..., None]
        better = err < best_err
        best_err[better], best[better] = err[better], bound[better]
    return best


def apply_clip(w: torch.Tensor, bound: torch.Tensor, group: int) -> torch.Tensor:
    """``w`` clamped per (row, group) to ±``bound``."""
    g = w.reshape(w.shape[0], -1, group)
    return torch.maximum(torch.minimum(g, bound), -bound).reshape(w.shape)


def input_groups(cap: BlockCapture) -> list[list[str]]:
    """The block's linears grouped by the input they read (q/k/v together, gate/up together)."""
    groups: list[list[str]] = []
    for name in cap.linears:
        x = cap.inputs[name][0]
        for grp in groups:
            y = cap.inputs[grp[0]][0]
            if y.shape == x.shape and torch.equal(y, x):
                grp.append(name)
                break
        else:
            groups.append([name])
    return groups


def _inside(module: nn.Module, lin: nn.Linear) -> bool:
    return any(m is lin for m in module.modules())


@torch.no_grad()
def awq_block(view, cap: BlockCapture, bits: int, group: int, perp_weight: float, fold_attn_out: bool) -> dict:
    """One block's effective weights after AWQ's scale and clip search, and α per searched group (by its
    first linear): {"weights": {...}, "alphas": {...}}."""
    scales, alphas = {}, {}
    for grp in input_groups(cap):
        lins = [cap.linears[n] for n in grp]
        in_attn = _inside(view.attn, lins[0])
        if len(grp) > 1:
            module, calls = (view.attn, cap.attn_calls) if in_attn else (view.mlp, cap.mlp_calls)
        elif in_attn and not fold_attn_out:
            continue  # the reference code scales the attention output only where it folds into v_proj
        else:
            module, calls = lins[0], [((x,), {}) for x in cap.inputs[grp[0]]]
        x = cap.rows(grp[0])
        alpha, s, _ = search_scale(module, lins, x.abs().mean(0), calls, bits, group, perp_weight)
        alphas[grp[0]] = alpha
        for n in grp:
            scales[n] = s
    weights = {}
    for name, lin in cap.linears.items():
        s = scales.get(name, torch.ones(lin.in_features))
        ws = lin.weight.data.float() * s
        if not any(k in name for k in CLIP_SKIP):
            ws = apply_clip(ws, search_clip(ws, cap.rows(name) / s, bits, group), group)
        weights[name] = quantize_rtn(ws, bits, group) / s
    return {"weights": weights, "alphas": alphas}


@torch.no_grad()
def awq_model(base: nn.Module, comp: nn.Module, batches: Sequence[torch.Tensor], bits: int = 4, group: int = 64,
              perp_weight: float = 1.0, cached: bool = True) -> list[float]:
    """Write AWQ weights into ``comp`` (a copy of ``base``), calibrated on ``base``; the chosen α per group.
    ``cached``: each block's inputs from the block below on kept inputs (``block_captures``), as the
    reference code does; the same numbers as a forward up to each block."""
    an = anatomy(comp)
    alphas = []
    for layer, cap in block_captures(base, batches, cached):
        view = an.blocks[layer]
        mine = BlockCapture(linears={n: m for n, m in view.layer.named_modules() if isinstance(m, nn.Linear)},
                            inputs=cap.inputs, attn_calls=cap.attn_calls, mlp_calls=cap.mlp_calls)
        res = awq_block(view, mine, bits, group, perp_weight, fold_attn_out=an.n_rep == 1)
        for name, w in res["weights"].items():
            mine.linears[name].weight.data.copy_(w.to(mine.linears[name].weight.dtype))
        alphas += list(res["alphas"].values())
    return alphas
