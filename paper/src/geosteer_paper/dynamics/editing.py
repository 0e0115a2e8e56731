"""Editing specificity of FFN-value edits vs random directions (paper App. C.5, Fig. 13 bottom).

See :mod:`geosteer_paper.dynamics.prefix` for the definitions. Two edit kinds at layer ℓ, both as removable
interventions (neutral at zero norm):

- ``ffn_out``: Φ_ℓ += v at the last position of each prompt only.
- ``down_col``: the down projection's column j gains δ (j = the neuron with the largest |a_j| at the last
  position, per prompt), i.e. Φ_ℓ += a_j(x)·δ at *every* position; δ = v / a_j(last) so the last position
  receives exactly v. Implemented as a forward hook on the down projection (``down_proj`` / ``c_proj`` /
  ``dense_4h_to_h``); a test checks it against editing the weight itself.

‖v‖ = ``scale`` × the norm, at the prompt's last position, of the tensor the edit is added to: Φ_ℓ for
``ffn_out``, the down projection's output for ``down_col``. Without a post-FFN norm the two are the same
tensor. On Gemma-3 the post-FFN norm follows the down projection, so there a ``down_col`` edit is sized by
(and added to) the down projection's output before that norm, and Φ_ℓ changes by the norm's response to it,
not by exactly v. Target token t: rank ``target_rank`` (0 = argmax) of
the stock next-token logits of each prompt.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn

from geosteer.errors import GeosteerError
from geosteer.hooks import HookSet, add_hook
from geosteer.interventions import steer
from geosteer.models.anatomy import anatomy, child_named
from geosteer.models.loading import input_device
from geosteer_paper.dynamics.prefix import DIRECTIONS, EDIT_KINDS

DOWN_NAMES = ("down_proj", "c_proj", "dense_4h_to_h")


def down_projection(model: nn.Module, layer: int) -> nn.Module:
    """The FFN's output (down) projection of ``layer``."""
    return child_named(anatomy(model).blocks[layer].mlp, DOWN_NAMES, "down projection")


class FFNOutEdit:
    """Φ_ℓ[:, -1] += vecs (batch, d) at ``layer``."""

    def __init__(self, layer: int, vecs: torch.Tensor) -> None:
        self.layer, self.vecs = layer, vecs

    def attach(self, model: nn.Module) -> Callable[[], None]:
        hooks = HookSet()

        def fn(x: torch.Tensor, ctx) -> torch.Tensor:
            x = x.clone()
            x[:, -1] = x[:, -1] + self.vecs.to(x.device, x.dtype)
            return x

        add_hook(model, "mlp_out", self.layer, fn, hooks)
        return hooks.remove


class DownColumnEdit:
    """W_down[:, j_b] += δ_b for prompt b at ``layer``: the down projection's output gains a_{j_b}·δ_b."""

    def __init__(self, layer: int, neurons: torch.Tensor, deltas: torch.Tensor) -> None:
        self.layer, self.neurons, self.deltas = layer, neurons, deltas

    def attach(self, model: nn.Module) -> Callable[[], None]:
        anatomy(model).check_layers([self.layer])
        mod = down_projection(model, self.layer)

        def hook(m, args, out):
            a = args[0]
            aj = a.gather(-1, self.neurons.to(a.device).view(-1, 1, 1).expand(a.shape[0], a.shape[1], 1))
            return out + aj * self.deltas.to(out.device, out.dtype)[:, None, :]

        h = mod.register_forward_hook(hook)
        return h.remove


@torch.no_grad()
def _probe(model: nn.Module, ids: torch.Tensor, layer: int
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Stock last-position logits (B, V), Φ_ℓ at the last position (B, d), the down projection's input (B, m)
    and output (B, d) there (the output is Φ_ℓ itself unless a post-FFN norm follows, as on Gemma-3)."""

    got: dict[str, torch.Tensor] = {}
    hooks = HookSet()
    add_hook(model, "mlp_out", layer, lambda x, ctx: got.__setitem__("phi", x[:, -1].detach()), hooks)
    h = down_projection(model, layer).register_forward_hook(
        lambda m, args, out: got.update(act=args[0][:, -1].detach(), down=out[:, -1].detach()))
    try:
        logits = model(ids.to(input_device(model))).logits[:, -1]
    finally:
        h.remove()
        hooks.remove()
    return logits.double().cpu(), got["phi"].double().cpu(), got["act"].double().cpu(), got["down"].double().cpu()


@torch.no_grad()
def last_logits(model: nn.Module, ids: torch.Tensor, interventions: Sequence = ()) -> torch.Tensor:

    with steer(model, *interventions):
        return model(ids.to(input_device(model))).logits[:, -1].double().cpu()


def specificity(dz: torch.Tensor, target: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per row of Δz (B, V): target_move = Δz_t − mean_{v≠t}Δz_v, drift = std_{v≠t}Δz_v, their ratio."""
    mask = torch.ones_like(dz, dtype=torch.bool)
    mask[torch.arange(dz.shape[0]), target] = False
    others = dz[mask].view(dz.shape[0], -1)
    move = dz[torch.arange(dz.shape[0]), target] - others.mean(1)
    drift = others.std(1)
    return {"target_move": move, "drift": drift, "specificity": move / drift.clamp_min(1e-30)}


def _kl(base: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    lp, lq = base.log_softmax(-1), new.log_softmax(-1)
    return (lp.exp() * (lp - lq)).sum(-1)


def make_edit(kind: str, layer: int, vecs: torch.Tensor, act: torch.Tensor):
    """The intervention that puts ``vecs`` (B, d) on Φ_ℓ at the last position, by ``kind``."""
    if kind == "ffn_out":
        return FFNOutEdit(layer, vecs)
    j = act.abs().argmax(-1)
    aj = act.gather(-1, j[:, None])
    return DownColumnEdit(layer, j, vecs / aj)


def _edit_setup(model: nn.Module, layers: Sequence[int], direction: str, scale: float, target_rank: int
                ) -> tuple[list[int], torch.Tensor]:
    """Check the shared edit arguments; return the checked layers and the unembedding rows W_U (float64,
    centred over the vocabulary for ``direction="centered"``)."""
    if direction not in DIRECTIONS:
        raise GeosteerError(f"unknown direction '{direction}'; valid: {', '.join(DIRECTIONS)}")
    if not (scale > 0 and np.isfinite(scale)):
        raise GeosteerError(f"scale must be finite and > 0 (got {scale})")
    if target_rank < 0:
        raise GeosteerError(f"target rank must be >= 0 (got {target_rank})")
    checked = anatomy(model).check_layers(list(layers))
    w_u = model.get_output_embeddings().weight.detach().double().cpu()
    if direction == "centered":
        w_u = w_u - w_u.mean(0, keepdim=True)
    return checked, w_u


def _targets_and_directions(model: nn.Module, ids: torch.Tensor, layer: int, w_u: torch.Tensor, target_rank: int,
                            seeds: Sequence[int]) -> tuple[tuple, torch.Tensor, list[tuple]]:
    """What every edit of ``layer`` starts from: the probe (:func:`_probe`), each prompt's target token (rank
    ``target_rank`` of its stock next-token logits) and the edit directions, ``("target", -1, W_U[target])``
    then ``("random", s, N(0, 1) draws of numpy seed s)`` per seed."""
    probe = _probe(model, ids, layer)
    base = probe[0]
    if target_rank >= base.shape[-1]:
        raise GeosteerError(f"target rank {target_rank} >= vocabulary size {base.shape[-1]}")
    target = base.argsort(-1, descending=True)[:, target_rank]
    u_t = w_u[target]
    dirs = [("target", -1, u_t)]
    dirs += [("random", s, torch.from_numpy(np.random.default_rng(s).standard_normal(u_t.shape))) for s in seeds]
    return probe, target, dirs


def edit_study(model: nn.Module, ids: torch.Tensor, layers: Sequence[int], kinds: Sequence[str] = EDIT_KINDS,
               direction: str = "unembed", scale: float = 1.0, target_rank: int = 10,
               seeds: Sequence[int] = range(5)) -> tuple[list[dict], list[dict]]:
    """Target-direction vs random-direction edits: per (layer, kind, edit, seed, prompt) records + a summary."""
    bad = [k for k in kinds if k not in EDIT_KINDS]
    if bad:
        raise GeosteerError(f"unknown edit kind '{bad[0]}'; valid: {', '.join(EDIT_KINDS)}")
    layers, w_u = _edit_setup(model, layers, direction, scale, target_rank)
    records = []
    for layer in layers:
        (base, phi, act, down), target, dirs = _targets_and_directions(model, ids, layer, w_u, target_rank, seeds)
        norms = {"ffn_out": scale * phi.norm(dim=-1, keepdim=True),   # the tensor each edit is added to
                 "down_col": scale * down.norm(dim=-1, keepdim=True)}
        for kind in kinds:
            norm = norms[kind]
            for edit, seed, d in dirs:
                vecs = norm * d / d.norm(dim=-1, keepdim=True)
                new = last_logits(model, ids, (make_edit(kind, layer, vecs, act),))
                m = specificity(new - base, target)
                kl = _kl(base, new)
                for b in range(ids.shape[0]):
                    records.append({"layer": layer, "kind": kind, "edit": edit, "seed": seed, "prompt": b,
                                    "target": int(target[b]), "edit_norm": float(norm[b]),
                                    **{k: float(v[b]) for k, v in m.items()}, "kl": float(kl[b])})
    return records, summarise(records)


def summarise(records: list[dict]) -> list[dict]:
    """Mean over prompts (and random seeds) per (layer, kind, edit)."""
    keys = sorted({(r["layer"], r["kind"], r["edit"]) for r in records}, key=lambda t: (t[0], t[1], t[2] != "target"))
    out = []
    for layer, kind, edit in keys:
        rs = [r for r in records if (r["layer"], r["kind"], r["edit"]) == (layer, kind, edit)]
        row = {"layer": layer, "kind": kind, "edit": edit, "n": len(rs)}
        for k in ("specificity", "target_move", "drift", "kl"):
            row[k] = float(np.mean([r[k] for r in rs]))
        out.append(row)
    return out


def line_fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares line y ≈ a + b·x: (slope b, R² = 1 − SS_res/SS_tot); R² is nan when y is constant."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    b, a = np.polyfit(x, y, 1)
    ss_tot = float(((y - y.mean()) ** 2).sum())
    ss_res = float(((y - (a + b * x)) ** 2).sum())
    return float(b), (1.0 - ss_res / ss_tot) if ss_tot > 0 else float("nan")


def edit_linearity(model: nn.Module, ids: torch.Tensor, layers: Sequence[int], kinds: Sequence[str] = ("ffn_out",),
                   direction: str = "unembed", scales: Sequence[float] = (0.25, 0.5, 1.0, 2.0),
                   target_rank: int = 10, seeds: Sequence[int] = range(2)) -> tuple[list[dict], list[dict]]:
    """Is the target's movement linear in the edit size (paper App. C.5: "nearly linear")? :func:`edit_study`
    at every ``scale`` s; per (layer, kind, edit, seed, prompt) the line through the points (s, target_move(s))
    plus (0, 0) (a zero edit is exactly neutral): its slope and R². Returns (fits, summary per layer, kind,
    edit: mean and min R², mean slope)."""
    scales = [float(s) for s in scales]
    if len(scales) < 2 or len(set(scales)) < len(scales):
        raise GeosteerError(f"need at least 2 distinct scales (got {scales})")
    moves: dict[tuple, list[float]] = {}
    for s in scales:
        recs, _ = edit_study(model, ids, layers, kinds, direction, s, target_rank, seeds)
        for r in recs:
            moves.setdefault((r["layer"], r["kind"], r["edit"], r["seed"], r["prompt"]), []).append(r["target_move"])
    x = np.array([0.0, *scales])
    fits = []
    for (layer, kind, edit, seed, prompt), ys in moves.items():
        slope, r2 = line_fit(x, np.array([0.0, *ys]))
        fits.append({"layer": layer, "kind": kind, "edit": edit, "seed": seed, "prompt": prompt, "slope": slope,
                     "r2": r2, **{f"move_s{s:g}": m for s, m in zip(scales, ys, strict=True)}})
    summary = []
    for key in sorted({(f["layer"], f["kind"], f["edit"]) for f in fits}, key=lambda t: (t[0], t[1], t[2] != "target")):
        sel = [f for f in fits if (f["layer"], f["kind"], f["edit"]) == key]
        r2 = np.array([f["r2"] for f in sel])
        summary.append({"layer": key[0], "kind": key[1], "edit": key[2], "n": len(sel),
                        "r2_mean": float(np.nanmean(r2)), "r2_min": float(np.nanmin(r2)),
                        "slope_mean": float(np.mean([f["slope"] for f in sel]))})
    return fits, summary


@torch.no_grad()
def down_col_locality(model: nn.Module, ids: torch.Tensor, other: torch.Tensor, layers: Sequence[int],
                      direction: str = "unembed", scale: float = 1.0, target_rank: int = 10,
                      seeds: Sequence[int] = range(2)) -> tuple[list[dict], list[dict]]:
    """How local is a ``down_col`` edit? It changes a weight column, so it acts on every input. For each
    prompt's edit (built exactly as in :func:`edit_study`), KL(stock ‖ edited) of the next-token distribution
    at every position of ``other`` text (windows that are not the prompts), beside the KL at the prompt's own
    last position. (An ``ffn_out`` edit is zero on other text by construction.) Returns (records per layer,
    edit, seed, prompt; summary per layer and edit: means of ``kl_own``, ``kl_other``, ``kl_other_max``)."""

    layers, w_u = _edit_setup(model, layers, direction, scale, target_rank)
    dev = input_device(model)
    stock_other = model(other.to(dev)).logits.double().cpu().log_softmax(-1)
    records = []
    for layer in layers:
        (base, _, act, down), _, dirs = _targets_and_directions(model, ids, layer, w_u, target_rank, seeds)
        norm = scale * down.norm(dim=-1, keepdim=True)
        j = act.abs().argmax(-1)
        aj = act.gather(-1, j[:, None])
        for edit, seed, d in dirs:
            deltas = norm * d / d.norm(dim=-1, keepdim=True) / aj
            own = _kl(base, last_logits(model, ids, (DownColumnEdit(layer, j, deltas),)))
            for b in range(ids.shape[0]):
                n = other.shape[0]
                iv = DownColumnEdit(layer, j[b].repeat(n), deltas[b].expand(n, -1))
                new = all_logits(model, other, (iv,))
                kl = (stock_other.exp() * (stock_other - new.log_softmax(-1))).sum(-1)  # (n, T)
                records.append({"layer": layer, "edit": edit, "seed": seed, "prompt": b, "neuron": int(j[b]),
                                "kl_own": float(own[b]), "kl_other": float(kl.mean()),
                                "kl_other_max": float(kl.max()), "other_positions": int(kl.numel())})
    summary = []
    for key in sorted({(r["layer"], r["edit"]) for r in records}, key=lambda t: (t[0], t[1] != "target")):
        sel = [r for r in records if (r["layer"], r["edit"]) == key]
        summary.append({"layer": key[0], "edit": key[1], "n": len(sel),
                        **{k: float(np.mean([r[k] for r in sel])) for k in ("kl_own", "kl_other", "kl_other_max")}})
    return records, summary


@torch.no_grad()
def all_logits(model: nn.Module, ids: torch.Tensor, interventions: Sequence = ()) -> torch.Tensor:
    """Logits at every position (B, T, V), float64 on the CPU, under ``interventions``."""

    with steer(model, *interventions):
        return model(ids.to(input_device(model))).logits.double().cpu()
