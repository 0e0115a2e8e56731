"""Studies of where and how strongly the edits act: diagonal views (Table 5, Fig. 4), head localisation
(Fig. 7) and applied strength at the post-W_O output (Table 6). Each returns tidy rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from geosteer.attention import add_attention_handler
from geosteer.directional.config import check_site
from geosteer.directional.sites import ComponentScale
from geosteer.interventions import steer
from geosteer.models.anatomy import anatomy, first_tensor
from geosteer.models.limits import check_positions
from geosteer_paper.directional.diagonal import DiagonalCapture, layer_views, output_projection


def _quantiles(x: torch.Tensor) -> dict[str, float]:
    x = x.double().flatten()
    x = x[torch.isfinite(x)]
    if x.numel() == 0:
        return {}
    qs = torch.quantile(x, torch.tensor([0.01, 0.5, 0.99], dtype=x.dtype))
    return {"min": x.min().item(), "q01": qs[0].item(), "median": qs[1].item(), "q99": qs[2].item(),
            "max": x.max().item(), "mean": x.mean().item(), "frac_nonpositive": (x <= 0).double().mean().item(),
            "n": int(x.numel())}


@torch.no_grad()
def diagonal_study(model: nn.Module, ids: torch.Tensor, layers: Sequence[int] | None = None,
                   s_par: float = 0.0, map_layer: int | None = None, map_head: int = 0,
                   value_space: str = "head") -> tuple[list[dict], list[dict]]:
    """Per layer and form, the distribution of the diagonal change ΔA_tt (over tokens, and heads for the
    value forms; query position 0 left out: it sees only itself), plus the three maps of one head.

    Returns ``(summary_rows, map_rows)``; map rows are (view, query, key, weight) with view ∈ baseline,
    residual (Ã_tt = A_tt + ΔA_res), value_exclude_self, value_full; lower triangle only.
    """
    check_positions(model, ids.shape[-1], "window length")
    an = anatomy(model)
    layers = an.check_layers(layers)
    cap = DiagonalCapture(layers)
    with steer(model, cap):
        model(input_ids=ids)
    rows, maps = [], []
    for layer in layers:
        v = layer_views(model, cap, layer, s_par, value_space)
        for form in ("value_exclude_self", "value_full", "residual"):
            d = v[form]
            if d is None:
                continue
            stats = _quantiles(d[..., 1:])
            rows.append({"layer": layer, "form": form, "s_par": s_par, **stats})
        if layer == map_layer:
            w = v["weights"][0, map_head]
            q = w.shape[0]
            idx = torch.arange(q)
            views = {"baseline": w}
            for form in ("residual", "value_exclude_self", "value_full"):
                d = v[form]
                if d is None:
                    continue
                dd = d[0] if form == "residual" else d[0, map_head]
                e = w.clone()
                e[idx, idx] += dd
                views[form] = e
            for name, mat in views.items():
                for i in range(q):
                    for j in range(i + 1):
                        maps.append({"view": name, "layer": layer, "head": map_head, "query": i, "key": j,
                                     "weight": float(mat[i, j])})
    return rows, maps


def _next_token_loss(model: nn.Module, ids: torch.Tensor) -> float:
    logits = model(input_ids=ids).logits[:, :-1].float()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1)).item()


@torch.no_grad()
def head_localisation(model: nn.Module, ids: torch.Tensor, site: str = "value_exclude_self", s_par: float = 0.0,
                      layers: Sequence[int] | None = None, heads: Sequence[int] | None = None,
                      log: Callable[[str], None] = print) -> list[dict]:
    """Δloss (edited − baseline, mean next-token cross-entropy on ``ids``) of s∥-scaling one head at a time
    (``head`` ≥ 0) and all heads jointly (``head`` = −1), layer by layer (paper Fig. 7)."""
    check_positions(model, ids.shape[-1], "window length")
    an = anatomy(model)
    layers = an.check_layers(layers)
    heads = list(range(an.n_heads)) if heads is None else list(heads)
    base = _next_token_loss(model, ids)
    rows = []
    for layer in layers:
        for h in [-1, *heads]:
            iv = ComponentScale(site, s_par, 1.0, layers=[layer], heads=None if h < 0 else [h])
            with steer(model, iv):
                loss = _next_token_loss(model, ids)
            rows.append({"layer": layer, "head": h, "site": site, "s_par": s_par, "loss": loss,
                         "loss_baseline": base, "delta_loss": loss - base})
        joint = rows[-len(heads) - 1]["delta_loss"]
        single = [r["delta_loss"] for r in rows[-len(heads):]]
        log(f"layer {layer}: joint {joint:+.4f}, single {min(single):+.4f}..{max(single):+.4f}")
    return rows


def head_summary(rows: Sequence[dict]) -> list[dict]:
    """Per layer: joint Δ, single-head min/max, Σ|Δ_h| (sub-additivity check of the paper)."""
    out = []
    for layer in sorted({r["layer"] for r in rows}):
        rs = [r for r in rows if r["layer"] == layer]
        single = [r["delta_loss"] for r in rs if r["head"] >= 0]
        joint = next(r["delta_loss"] for r in rs if r["head"] < 0)
        out.append({"layer": layer, "joint": joint, "single_min": min(single), "single_max": max(single),
                    "single_abs_sum": sum(abs(x) for x in single),
                    "joint_within_band": min(single) <= joint <= max(single)})
    return out


class _PostWOAudit:
    """Per-token ‖ỹ−y‖/‖y‖ and ‖ỹ‖/‖y‖ at each layer's post-W_O output, y the unedited output of the same
    forward (same inputs), ỹ the edited one. Attach *after* the ComponentScale it audits."""

    def __init__(self, site: str, layers: Sequence[int]) -> None:
        self.site, self.layers = site, list(layers)
        self.pert: list[torch.Tensor] = []
        self.ret: list[torch.Tensor] = []
        self.layer_of: list[int] = []
        self._unedited: dict[int, torch.Tensor] = {}

    def _add(self, layer: int, y: torch.Tensor, y_new: torch.Tensor) -> None:
        n = y.double().norm(dim=-1)
        self.pert.append(((y_new.double() - y.double()).norm(dim=-1) / n).flatten())
        self.ret.append((y_new.double().norm(dim=-1) / n).flatten())
        self.layer_of.append(layer)

    def attach(self, model: nn.Module):
        an = anatomy(model)
        handles, removers = [], []
        for i in self.layers:
            blk = an.blocks[i]
            if self.site == "attn_out":  # the edit is a hook on the branch output: see it before and after
                def before(mod, args, out, i=i):
                    self._unedited[i] = first_tensor(out).detach().clone()

                def after(mod, args, out, i=i):
                    self._add(i, self._unedited.pop(i), first_tensor(out))

                handles.append(blk.attn_update.register_forward_hook(before, prepend=True))
                handles.append(blk.attn_update.register_forward_hook(after))
                continue
            proj = output_projection(blk.attn)

            def grab(call, proceed, i=i):  # runs inside the edit's proceed: the unedited aggregate
                out, w = proceed(call)
                self._unedited[i] = out.detach()
                return out, w

            def after_proj(mod, args, out, i=i):
                o = self._unedited.pop(i)
                y = mod.forward(o.reshape(*o.shape[:2], -1))  # .forward: not this hook again
                self._add(i, y, out)

            removers.append(add_attention_handler(blk.attn, grab))
            handles.append(proj.register_forward_hook(after_proj))

        def remove() -> None:
            for h in handles:
                h.remove()
            for r in removers:
                r()

        return remove


@torch.no_grad()
def applied_strength(model: nn.Module, ids: torch.Tensor, sites: Sequence[str] = ("attn_out", "value_exclude_self"),
                     s_par: float = 0.0, layers: Sequence[int] | None = None,
                     value_space: str = "head") -> list[dict]:
    """Table 6: per site (all ``layers`` edited at once, "Full No-Para" at s∥ = 0), the per-token
    perturbation norm ‖ỹ−y‖/‖y‖, energy ‖ỹ−y‖²/‖y‖² and retained norm ‖ỹ‖/‖y‖ at the post-W_O output,
    averaged over tokens (row ``layer`` = −1: over all layers and tokens)."""
    check_positions(model, ids.shape[-1], "window length")
    an = anatomy(model)
    layers = an.check_layers(layers)
    rows = []
    for site in map(check_site, sites):
        audit = _PostWOAudit(site, layers)
        vs = value_space if site.startswith("value_") else "head"
        with steer(model, ComponentScale(site, s_par, 1.0, layers=layers, value_space=vs), audit):
            model(input_ids=ids)
        per_layer: dict[int, tuple[list, list]] = {}
        for layer, p, r in zip(audit.layer_of, audit.pert, audit.ret, strict=True):
            per_layer.setdefault(layer, ([], []))
            per_layer[layer][0].append(p)
            per_layer[layer][1].append(r)
        everything = ([], [])
        for layer in sorted(per_layer):
            p, r = torch.cat(per_layer[layer][0]), torch.cat(per_layer[layer][1])
            everything[0].append(p)
            everything[1].append(r)
            rows.append({**_strength_row(site, s_par, layer, p, r), "value_space": vs})
        rows.append({**_strength_row(site, s_par, -1, torch.cat(everything[0]), torch.cat(everything[1])),
                     "value_space": vs})
    return rows


def _strength_row(site: str, s_par: float, layer: int, p: torch.Tensor, r: torch.Tensor) -> dict:
    ok = torch.isfinite(p) & torch.isfinite(r)
    p, r = p[ok], r[ok]
    return {"site": site, "s_par": s_par, "layer": layer, "tokens": int(p.numel()),
            "perturb_norm": p.mean().item(), "perturb_energy": (p * p).mean().item(),
            "retained_norm": r.mean().item()}
