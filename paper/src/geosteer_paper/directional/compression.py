"""Study 2: compressed copies of a model and the directional decomposition of their update error (Section 6.3).

Compression (fake-quantised / masked fp32 weights of every ``nn.Linear`` inside the decoder blocks; the
embeddings and LM head stay as they are):

- ``rtn<bits>``: round-to-nearest, asymmetric min/max per group of ``group`` input columns per row
  (``quant_grid``).
- ``awq<bits>``: AWQ as published (``geosteer_paper.directional.awq``): per-block scale search on the
  attention / MLP module outputs, then clip search; ``awq<bits>-perp<w>`` weights the perpendicular part
  of the scale search's error by w (beyond the paper; w = 1 is AWQ).
- ``gptq<bits>``: GPTQ (``geosteer_paper.directional.gptq``), blocks quantised in order from the inputs of the
  already quantised blocks.
- ``awqlite<bits>``: a simplified AWQ: one scale per linear, s = mean|x|^a with a ∈ {0, 0.1, …, 1}
  minimising that linear's own output error ‖X Ŵᵀ − X Wᵀ‖, no clipping.
- ``wanda<percent>``, ``wanda<N>:<M>``: Wanda pruning (Sun et al., 2024), score |W_ij|·‖X_j‖₂; the lowest
  ``percent`` per output row (unstructured), or keep the N best of every M consecutive inputs (N:M).

Calibration: RTN needs none; awqlite and Wanda use the statistics of one pass of the *uncompressed*
model (``calibrate``; Wanda's reference code prunes layer by layer instead); AWQ captures each block's
inputs from the uncompressed model, GPTQ from the model quantised so far (both as their reference code).

Error decomposition: with Δ_base and Δ_comp the update of a layer's attention / MLP / block in the
uncompressed and compressed model on the same tokens (each model runs end to end), e = Δ_comp − Δ_base is
split against Δ_base (Eq. 1-2): ‖e⊥‖/‖Δ_base‖, ‖e∥‖/‖Δ_base‖ and ‖e‖/‖Δ_base‖ per token.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn

from geosteer.directional.decompose import RunningStats, decompose
from geosteer.errors import GeosteerError
from geosteer.interventions import steer
from geosteer.models.anatomy import anatomy
from geosteer.record import Recorder
from geosteer_paper.directional.quant_grid import quantize_rtn

METHODS = ("rtn4", "awq4", "wanda50", "wanda4:8", "wanda2:4")  # the default set (the paper's)
METHOD_FORMS = ("rtn<bits>, awq<bits>, awq<bits>-perp<w> (w >= 1), gptq<bits>, awqlite<bits> (bits 2-8), "
                "wanda<percent> (1-99), wanda<N>:<M> (0<N<M)")
CALIBRATED = ("awq", "gptq")  # need the calibration batches themselves, not only the statistics


def parse_method(method: str) -> tuple[str, tuple]:
    """``"rtn3"`` → ("rtn", (3,)), ``"awq4-perp8"`` → ("awq", (4, 8.0)), ``"wanda60"`` → ("wanda", (0.6,)),
    ``"wanda2:4"`` → ("wanda_nm", (2, 4))."""
    import re

    m = re.fullmatch(r"(rtn|gptq|awqlite)([2-8])", method)
    if m:
        return m.group(1), (int(m.group(2)),)
    m = re.fullmatch(r"awq([2-8])(?:-perp(\d+(?:\.\d+)?))?", method)
    if m and (m.group(2) is None or float(m.group(2)) >= 1):
        return "awq", (int(m.group(1)), float(m.group(2) or 1.0))
    m = re.fullmatch(r"wanda(\d{1,2})", method)
    if m and 1 <= int(m.group(1)) <= 99:
        return "wanda", (int(m.group(1)) / 100,)
    m = re.fullmatch(r"wanda(\d+):(\d+)", method)
    if m and 0 < int(m.group(1)) < int(m.group(2)):
        return "wanda_nm", (int(m.group(1)), int(m.group(2)))
    raise GeosteerError(f"unknown compression method '{method}'; valid forms: {METHOD_FORMS} "
                        f"(e.g. {', '.join(METHODS)})")
ERROR_STATS = ("perp_err", "par_err", "total_err")


def block_linears(model: nn.Module) -> dict[str, nn.Linear]:
    """Every ``nn.Linear`` inside the decoder blocks, by qualified name."""
    an = anatomy(model)
    out = {}
    for i, b in enumerate(an.blocks):
        for name, mod in b.layer.named_modules():
            if isinstance(mod, nn.Linear):
                out[f"{i}.{name}"] = mod
    return out


@torch.no_grad()
def calibrate(model: nn.Module, batches: Sequence[torch.Tensor], keep_rows: int = 512) -> dict[str, dict]:
    """Per linear: Σx² and Σ|x| per input channel, row count, and up to ``keep_rows`` sample input rows."""
    lins = block_linears(model)
    stats: dict[str, dict] = {n: {"sq": 0.0, "abs": 0.0, "n": 0, "rows": []} for n in lins}
    handles = []
    for name, mod in lins.items():
        def hook(m, args, name=name):
            x = args[0].detach().reshape(-1, args[0].shape[-1]).float()
            st = stats[name]
            st["sq"] = st["sq"] + (x * x).sum(0)
            st["abs"] = st["abs"] + x.abs().sum(0)
            st["n"] += x.shape[0]
            have = sum(r.shape[0] for r in st["rows"])
            if have < keep_rows:
                idx = torch.linspace(0, x.shape[0] - 1, min(x.shape[0], keep_rows - have)).long()
                st["rows"].append(x[idx])

        handles.append(mod.register_forward_pre_hook(hook))
    try:
        for ids in batches:
            model(input_ids=ids, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    for st in stats.values():
        st["rows"] = torch.cat(st["rows"])
    return stats


def quantize_awq(w: torch.Tensor, act_abs_mean: torch.Tensor, x: torch.Tensor, bits: int = 4, group: int = 64,
                 grid: int = 11) -> tuple[torch.Tensor, float]:
    """The simplified (``awqlite``) scale search on one linear; returns (dequantised weight, chosen a)."""
    ref = x @ w.T
    best, best_a, best_w = None, 0.0, None
    for k in range(grid):
        a = k / (grid - 1)
        s = act_abs_mean.clamp_min(1e-5) ** a
        s = s / (s.max() * s.min()).sqrt()
        wq = quantize_rtn(w * s[None], bits, group) / s[None]
        err = ((x @ wq.T - ref) ** 2).mean().item()
        if best is None or err < best:
            best, best_a, best_w = err, a, wq
    return best_w, best_a


def prune_wanda(w: torch.Tensor, sq_norm: torch.Tensor, sparsity: float = 0.5,
                nm: tuple[int, int] | None = None) -> torch.Tensor:
    """Wanda: score |W_ij|·‖X_j‖₂; zero the lowest ``sparsity`` per output row, or keep N of every M inputs."""
    score = w.abs() * sq_norm.sqrt()[None]
    mask = torch.ones_like(w, dtype=torch.bool)
    if nm is None:
        k = int(w.shape[1] * sparsity)
        idx = torch.topk(score, k, dim=1, largest=False).indices
        mask.scatter_(1, idx, False)
    else:
        n, m = nm
        if w.shape[1] % m:
            raise GeosteerError(f"in_features {w.shape[1]} is not a multiple of M={m}")
        s = score.reshape(w.shape[0], -1, m)
        idx = torch.topk(s, m - n, dim=-1, largest=False).indices
        mk = torch.ones_like(s, dtype=torch.bool)
        mk.scatter_(-1, idx, False)
        mask = mk.reshape(w.shape)
    return w * mask


@torch.no_grad()
def compress(model: nn.Module, method: str, calib: dict[str, dict], group: int = 64,
             batches: Sequence[torch.Tensor] | None = None) -> tuple[nn.Module, dict]:
    """A compressed deep copy of ``model`` and per-method info (e.g. AWQ exponents, achieved sparsity);
    ``awq``/``gptq`` need the calibration ``batches`` (token ids) as well."""
    kind, args = parse_method(method)
    comp = copy.deepcopy(model)
    info: dict = {"method": method}
    alphas: list[float] = []
    if kind in CALIBRATED:
        if not batches:
            raise GeosteerError(f"method '{method}' needs calibration batches (token ids)")
        if kind == "gptq":
            from geosteer_paper.directional.gptq import gptq_model

            gptq_model(comp, batches, args[0], group)
        else:
            from geosteer_paper.directional.awq import awq_model

            alphas = awq_model(model, comp, batches, args[0], group, perp_weight=args[1])
    else:
        for name, lin in block_linears(comp).items():
            lin.weight.data.copy_(_compress_one(lin.weight.data.float(), kind, args, calib[name], group, alphas)
                                  .to(lin.weight.dtype))
    weights = [lin.weight for lin in block_linears(comp).values()]
    info["zero_fraction"] = sum(int((w == 0).sum()) for w in weights) / sum(w.numel() for w in weights)
    if alphas:
        info["awq_alpha_mean"] = sum(alphas) / len(alphas)
    return comp, info


def _compress_one(w: torch.Tensor, kind: str, args: tuple, st: dict, group: int, alphas: list) -> torch.Tensor:
    """One linear's weight under a method that needs only the calibration statistics ``st``."""
    if kind == "rtn":
        return quantize_rtn(w, args[0], group)
    if kind == "awqlite":
        new, a = quantize_awq(w, st["abs"] / st["n"], st["rows"], args[0], group)
        alphas.append(a)
        return new
    if kind == "wanda":
        return prune_wanda(w, st["sq"], args[0])
    return prune_wanda(w, st["sq"], nm=args)


@torch.no_grad()
def update_errors(base: nn.Module, comp: nn.Module, prompts: Sequence[torch.Tensor]) -> list[dict]:
    """Per layer and site (attn, mlp, block): mean/std over tokens of ‖e⊥‖, ‖e∥‖, ‖e‖ relative to ‖Δ_base‖."""

    points = ("resid_pre", "attn_out", "mlp_out", "resid_post")
    acc: dict[tuple[int, str], RunningStats] = {}
    for ids in prompts:
        recs = []
        for m in (base, comp):
            rec = Recorder(points)
            with steer(m, rec):
                m(input_ids=ids, use_cache=False)
            recs.append(rec)
        n_layers = anatomy(base).n_layers
        for layer in range(n_layers):
            upd = []
            for rec in recs:
                x, a, f, y = (rec[p, layer][0].float() for p in points)
                upd.append({"attn": a, "mlp": f, "block": y - x})
            for site in ("attn", "mlp", "block"):
                db, dc = upd[0][site], upd[1][site]
                e = dc - db
                _, par, perp = decompose(e, db)
                nb = db.norm(dim=-1).clamp_min(1e-12)
                vals = torch.stack([perp.norm(dim=-1) / nb, par.norm(dim=-1) / nb, e.norm(dim=-1) / nb], -1)
                acc.setdefault((layer, site), RunningStats()).update(vals, torch.ones(vals.shape[:2], dtype=torch.bool))
    rows = []
    for (layer, site), rs in sorted(acc.items()):
        s = rs.summary()
        row = {"layer": layer, "site": site, "n_tokens": s["n"]}
        for j, name in enumerate(ERROR_STATS):
            row[f"{name}_mean"] = float(s["mean"][j])
            row[f"{name}_std"] = float(s["std"][j])
        rows.append(row)
    return rows
