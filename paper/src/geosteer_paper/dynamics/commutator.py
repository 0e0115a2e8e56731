"""The tangential attention–FFN commutator of paper App. B and the reordering error it predicts (Fig. 8 right).

Fields. At a token with block input x (r = ‖x‖, u = x/r) the tangential updates are ã = P_u A and
b̃ = P_u Φ, extended as fields by ã(x) = P_{x/‖x‖} A(x), b̃(x) = P_{x/‖x‖} Φ(x). Their Lie bracket

    [ã, b̃] = Db̃ · ã − Dã · b̃          (Eq. (14): [A, Φ] = DΦ A − DA Φ, here on the tangential fields)

has two halves: the FFN half Db̃·ã (the FFN's tangential field differentiated along the attention step,
exact, ``torch.func.jvp``) and the attention half Dã·b̃ — attention is a field on the whole sequence, so every
token moves by its own b̃ (the particle system's bracket), by central differences with step ``h``
(two truncated forwards). Normalised as in App. B, ‖[a, b]‖/(‖a‖‖b‖) for the sphere fields a = ã/r, b = b̃/r,
which equals C = r‖[ã, b̃]‖/(‖ã‖‖b̃‖) (scale-free). The existing ``diagnose`` column ``commutator`` is a
finite-difference DΦ·A half only, not tangential.

Reordering error. The block run in the other order, FFN first, is x_sw = x + Φ(x) + A(x + Φ(x)) (attention
of the whole sequence after every token's FFN step); the error is the angle between the directions of x_sw
and of the stock output x' = x + A(x) + Φ(x + A(x)), per token. By Eq. (14) x_sw − x' ≈ −[A, Φ] to second
order in the step, so a small C should mean a small angle: ``reorder_study`` measures both per token and
reports their per-layer means and Spearman correlations (tokens within a layer, and layers).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import nn

from geosteer.dynamics import sphere
from geosteer.dynamics.diagnostics import ffn_field
from geosteer.errors import GeosteerError
from geosteer.hooks import HookSet, add_hook
from geosteer.models.anatomy import anatomy
from geosteer.models.limits import check_positions
from geosteer.models.loading import input_device


def tangential_field(f: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    """x ↦ P_{x/‖x‖} f(x)."""
    def g(x: torch.Tensor) -> torch.Tensor:
        return sphere.tangential(sphere.unit(x), f(x))

    return g


def bracket_halves(a: Callable, b: Callable, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(Db·a, Da·b) at x (..., d) for fields a, b acting row-wise, by forward-mode autodiff; [a, b] is
    their difference."""
    av, bv = a(x), b(x)
    _, db_a = torch.func.jvp(b, (x,), (av,))
    _, da_b = torch.func.jvp(a, (x,), (bv,))
    return db_a, da_b


def normalised(bracket: torch.Tensor, a: torch.Tensor, b: torch.Tensor, x: torch.Tensor,
               eps: float = 1e-12) -> torch.Tensor:
    """r‖[ã, b̃]‖/(‖ã‖‖b̃‖): App. B's ‖[a, b]‖/(‖a‖‖b‖) for the sphere fields a = ã/r, b = b̃/r."""
    return x.norm(dim=-1) * bracket.norm(dim=-1) / (a.norm(dim=-1) * b.norm(dim=-1) + eps)


class _Stop(Exception):
    pass


@torch.no_grad()
def _attn_at(model: nn.Module, ids: torch.Tensor, layer: int, new_x: Callable | None) -> dict:
    """One forward truncated after ``layer``'s attention: ``new_x(x) -> x`` replaces the block input;
    returns the block input ``x`` and attention update ``a`` of that layer."""

    got: dict = {}
    hooks = HookSet()

    def pre(x, ctx):
        got["x0"] = x
        if new_x is None:
            return None
        y = new_x(x)
        return y

    def post(a, ctx):
        got["x"] = ctx.state["resid_pre"]
        got["a"] = a
        raise _Stop

    add_hook(model, "resid_pre", layer, pre, hooks)
    add_hook(model, "attn_out", layer, post, hooks)
    try:
        model(input_ids=ids, use_cache=False)
    except _Stop:
        pass
    finally:
        hooks.remove()
    return got


def _spearman(x: list[float], y: list[float]) -> float:
    from scipy.stats import spearmanr

    if len(x) < 3:
        return math.nan
    return float(spearmanr(x, y).statistic)


def reorder_study(model: nn.Module, ids: torch.Tensor, layers: Sequence[int] | None = None, h: float = 1e-2,
                  with_bos: bool = False) -> tuple[list[dict], list[dict]]:
    """Per layer: tangential commutator C (both halves) and the reordering angular error, per token.

    Returns (layer rows, summary rows). Layer rows: means of C, of the two normalised halves, of the
    reorder angle (degrees) and of the stock step angle, the within-layer Spearman ρ(C, angle) over tokens and
    the cosine between the measured x_sw − x' and the second-order prediction −[A, Φ] (tangential parts).
    Position 0 is left out unless ``with_bos``.
    """
    check_positions(model, ids.shape[-1], "window length")

    an = anatomy(model)
    if an.parallel_residual:
        raise GeosteerError("reordering needs sequential blocks (this model's attention and FFN read the same x)")
    chosen = an.check_layers(layers)
    if not 0 < h < 1:
        raise GeosteerError(f"finite-difference step h must be in (0, 1) (got {h})")
    ids = ids.to(input_device(model))
    rows = []
    for layer in chosen:
        block = an.blocks[layer]

        def phi(z, block=block):
            return ffn_field(block, z)

        base = _attn_at(model, ids, layer, None)
        x, a = base["x"].float(), base["a"].float()
        with torch.no_grad():
            phi_x = phi(x)
            x_stock = x + a + phi(x + a)
        b_t = tangential_field(phi)
        db_a = torch.func.jvp(b_t, (x,), (sphere.tangential(sphere.unit(x), a),))[1]
        bt_x = b_t(x).detach()
        plus = _attn_at(model, ids, layer, lambda z, v=bt_x: z + h * v)
        minus = _attn_at(model, ids, layer, lambda z, v=bt_x: z - h * v)
        at_p = sphere.tangential(sphere.unit(plus["x"].float()), plus["a"].float())
        at_m = sphere.tangential(sphere.unit(minus["x"].float()), minus["a"].float())
        da_b = (at_p - at_m) / (2 * h)
        swap = _attn_at(model, ids, layer, lambda z: z + phi(z))
        x_sw = x + phi_x + swap["a"].float()
        with torch.no_grad():
            u = sphere.unit(x)
            at, bt = sphere.tangential(u, a), bt_x
            br = db_a - da_b
            C = normalised(br, at, bt, x)
            c_ffn = normalised(db_a, at, bt, x)
            c_attn = normalised(da_b, at, bt, x)
            ang = torch.rad2deg(torch.arccos(sphere.cosine(x_stock, x_sw).clamp(-1, 1)))
            step = torch.rad2deg(torch.arccos(sphere.cosine(x, x_stock).clamp(-1, 1)))
            # second-order prediction of the reordering difference: x_sw − x' ≈ −[A, Φ] (tangential parts)
            pred_cos = sphere.cosine(sphere.tangential(u, x_sw - x_stock), -br)
        keep = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
        if not with_bos:
            keep[:, 0] = False
        sel = {k: v[keep].double().cpu() for k, v in
               (("C", C), ("c_ffn", c_ffn), ("c_attn", c_attn), ("angle", ang), ("step", step), ("pc", pred_cos))}
        rows.append({"layer": layer, "commutator": sel["C"].mean().item(), "ffn_half": sel["c_ffn"].mean().item(),
                     "attn_half": sel["c_attn"].mean().item(), "reorder_angle_deg": sel["angle"].mean().item(),
                     "step_angle_deg": sel["step"].mean().item(), "rho_tokens": _spearman(sel["C"].tolist(),
                                                                                         sel["angle"].tolist()),
                     "cos_pred_vs_measured": sel["pc"].mean().item(), "tokens": int(keep.sum())})
    summary = [{"layers": len(rows),
                "rho_layers": _spearman([r["commutator"] for r in rows], [r["reorder_angle_deg"] for r in rows]),
                "rho_layers_relative": _spearman([r["commutator"] for r in rows],
                                                 [r["reorder_angle_deg"] / max(r["step_angle_deg"], 1e-12)
                                                  for r in rows])}]
    return rows, summary
