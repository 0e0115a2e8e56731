"""Top-k value aggregation (paper App. C.2, Table 5): A_i^(k) = Σ_{j ∈ top-k(i)} a_ij V u_j / Σ_{j ∈ top-k(i)} a_ij.

An attention handler (GQA-aware). :func:`topk_study` measures per k the per-layer cosine to the stock block
update from the same input, and the loss increase with top-k on all chosen layers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from geosteer.attention import AttentionCall, attach_handlers, attention_weights, repeat_kv
from geosteer.dynamics import sphere
from geosteer.dynamics.config import check_k
from geosteer.eval.windows import nll_sum  # noqa: F401 - re-exported (moved to eval.windows)
from geosteer.interventions import HookIntervention, steer
from geosteer.models.anatomy import anatomy
from geosteer.models.limits import check_positions
from geosteer.models.loading import input_device
from geosteer.record import Recorder


def topk_attention(call: AttentionCall, k: int) -> torch.Tensor:
    """Top-k renormalised attention output, (batch, q, heads, dv) as transformers expects."""
    w = attention_weights(call).to(call.value.dtype)  # (b, H, q, kv), masked entries are 0
    kk = min(k, w.shape[-1])
    vals, idx = w.topk(kk, dim=-1)
    sparse = torch.zeros_like(w).scatter_(-1, idx, vals)
    sparse = sparse / sparse.sum(-1, keepdim=True).clamp_min(torch.finfo(w.dtype).tiny)
    out = sparse @ repeat_kv(call.value, call.n_rep)  # (b, H, q, dv)
    return out.transpose(1, 2).contiguous()


@dataclass
class TopKAttention:
    """Keep the top-``k`` attention weights of every row on ``layers`` (None = all)."""

    k: int
    layers: Sequence[int] | None = None

    def __post_init__(self) -> None:
        self.k = check_k(self.k)

    def attach(self, model: nn.Module) -> Callable[[], None]:
        def handler(call, proceed):
            return topk_attention(call, self.k), None

        return attach_handlers(model, self.layers, lambda layer: handler)


@torch.no_grad()
def topk_study(model: nn.Module, input_ids: torch.Tensor, ks: Sequence[int] = (1, 4, 16, 32), *,
               layers: Sequence[int] | None = None, batch_size: int = 4) -> tuple[list[dict], list[dict]]:
    """(per-layer cosine rows, per-k summary rows) for top-k aggregation; see the module docstring."""
    check_positions(model, input_ids.shape[-1], "window length")

    ks = [check_k(k) for k in ks]
    an = anatomy(model)
    chosen = an.check_layers(layers)
    cos_acc = {(k, layer): [0.0, 0.0, 0] for k in ks for layer in chosen}
    loss = {k: [0.0, 0] for k in [0, *ks]}
    device = input_device(model)
    for i in range(0, input_ids.shape[0], batch_size):
        ids = input_ids[i : i + batch_size].to(device)
        rec = Recorder(("resid_pre", "resid_post"), layers=chosen, to_cpu=False)
        with steer(model, rec):
            s, n = nll_sum(model, ids)
        loss[0][0] += s
        loss[0][1] += n
        pre = {layer: rec["resid_pre", layer][0] for layer in chosen}
        upd = {layer: rec["resid_post", layer][0] - pre[layer] for layer in chosen}
        for k in ks:
            got: dict[int, torch.Tensor] = {}

            def force(x, ctx, pre=pre):
                return pre[ctx.layer]

            def grab(x, ctx, got=got):
                got[ctx.layer] = x - ctx.state["resid_pre"]

            with steer(model, TopKAttention(k, chosen), HookIntervention("resid_pre", force, chosen),
                       HookIntervention("resid_post", grab, chosen)):
                model(input_ids=ids, use_cache=False)
            for layer in chosen:
                c = sphere.cosine(got[layer].float(), upd[layer].float()).double()
                acc = cos_acc[(k, layer)]
                acc[0] += c.sum().item()
                acc[1] += (c * c).sum().item()
                acc[2] += c.numel()
            with steer(model, TopKAttention(k, chosen)):
                s, n = nll_sum(model, ids)
            loss[k][0] += s
            loss[k][1] += n
    base = loss[0][0] / loss[0][1]
    layer_rows, summary = [], []
    for k in ks:
        tot = [0.0, 0]
        for layer in chosen:
            s, ss, n = cos_acc[(k, layer)]
            mean = s / n
            std = math.sqrt(max(0.0, ss / n - mean * mean))
            layer_rows.append({"k": k, "layer": layer, "cos_mean": mean, "cos_std": std, "n": n})
            tot[0] += s
            tot[1] += n
        lk = loss[k][0] / loss[k][1]
        summary.append({"k": k, "cos_mean": tot[0] / tot[1], "loss": lk, "loss_stock": base,
                        "loss_increase": lk - base, "tokens": loss[k][1]})
    return layer_rows, summary
