"""Exploring learned surfaces (paper §5): which layers matter, which surfaces are large, what they look like.

- :func:`layer_sensitivity` — zero each layer's surfaces in turn and measure the next-token KL divergence
  KL(P_surfaces ‖ P_layer-zeroed) and the largest logit change at the end of each prompt.
- :func:`top_surfaces` — per-surface Frobenius norms, largest first.
- :func:`geosteer.manifold.edit.control_net` / ``format_control_net`` — one surface's K×K control net.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from geosteer.eval.generation import prompt_ids
from geosteer.interventions import steer
from geosteer.manifold.edit import Edit, live, surface_norms
from geosteer.models.loading import input_device


def _last_logits(model, tok, prompts: Sequence[str]) -> torch.Tensor:

    device = input_device(model)
    rows = []
    with torch.no_grad():
        for p in prompts:
            ids = prompt_ids(tok, p).to(device)
            rows.append(model(input_ids=ids, use_cache=False).logits[0, -1].float())
    return torch.stack(rows)


def layer_sensitivity(model, tok, bank, prompts: Sequence[str], layers: Sequence[int] | None = None,
                      progress=None) -> list[dict]:
    """Rows ``{layer, mean_kl, max_kl, max_logit_change}`` sorted by ``mean_kl`` (largest first).

    The model runs with ``bank`` attached (it must not already carry another bank); each layer's surfaces
    are zeroed live, one layer at a time.
    """
    if not prompts:
        raise ValueError("no prompts")
    layers = list(bank.layers) if layers is None else [int(x) for x in layers]
    for x in layers:
        bank.slot(x)
    rows = []
    with steer(model, bank):
        ref = _last_logits(model, tok, prompts)
        logp_ref = F.log_softmax(ref, -1)
        for i, layer in enumerate(layers):
            with live(bank, Edit("zero", layers=[layer])):
                out = _last_logits(model, tok, prompts)
            logp = F.log_softmax(out, -1)
            kl = (logp_ref.exp() * (logp_ref - logp)).sum(-1).clamp_min(0.0)
            rows.append({"layer": layer, "mean_kl": float(kl.mean()), "max_kl": float(kl.max()),
                         "max_logit_change": float((out - ref).abs().max())})
            if progress is not None:
                progress(i + 1, len(layers))
    rows.sort(key=lambda r: -r["mean_kl"])
    return rows


def top_surfaces(bank, n: int = 10, layers: Sequence[int] | None = None) -> list[dict]:
    """The ``n`` largest surfaces by Frobenius norm: rows ``{layer, head, dim, norm, max_abs}``."""
    norms = surface_norms(bank, layers=list(layers) if layers is not None else None)
    valid = int((norms >= 0).sum())
    if valid == 0:
        return []
    n = min(int(n), valid)
    vals, idx = torch.sort(norms.flatten(), descending=True, stable=True)  # ties: bank order
    vals, idx = vals[:n], idx[:n]
    H, D = norms.shape[1], norms.shape[2]
    c = bank.coefficients.detach()
    rows = []
    for v, i in zip(vals.tolist(), idx.tolist(), strict=True):
        s, h, d = i // (H * D), (i // D) % H, i % D
        rows.append({"layer": bank.layers[s], "head": h, "dim": d, "norm": v,
                     "max_abs": float(c[s, h, d].abs().max())})
    return rows


def layer_norms(bank) -> list[dict]:
    """Per layer: total Frobenius norm, mean and max surface norm."""
    norms = surface_norms(bank)
    rows = []
    for s, layer in enumerate(bank.layers):
        n = norms[s]
        rows.append({"layer": layer, "norm": float(n.pow(2).sum().sqrt()),
                     "mean_surface_norm": float(n.mean()), "max_surface_norm": float(n.max())})
    return rows
