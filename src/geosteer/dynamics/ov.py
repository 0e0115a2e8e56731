"""Weight-only OV diagnostics (paper App. C.6): ‖skew(V)‖_F / ‖sym(V)‖_F per head, and the fraction of heads
with a positive dominant eigenvalue.

V_h = W_O,h · W_V,h (GQA: kv head h // n_rep) is read by probing the attention module (the norm outputs
[0; I], the attention returns one-hot head outputs), so every family is handled alike. ``ov_norm="gain"``
folds the pre-norm in as diag(:func:`sphere_gain`) on unit directions.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from geosteer.attention import add_attention_handler, use_geosteer_attention
from geosteer.errors import GeosteerError
from geosteer.models.anatomy import anatomy, first_tensor, replace_first


@torch.no_grad()
def ov_weights(model: nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer ``(W_V (n_kv, d, dv), W_O (n_heads, dv, d))`` with v = x W_V[g] and out = Σ_h o_h W_O[h]."""
    an = anatomy(model)
    use_geosteer_attention(model)
    d, H, dv = an.d_model, an.n_heads, an.head_dim
    n = 1 + max(d, H * dv)
    probe = torch.zeros(1, n, d)
    probe[0, 1 : d + 1] = torch.eye(d)
    heads_out = torch.zeros(1, n, H, dv)
    heads_out[0, 1 : H * dv + 1].view(H * dv, H * dv).copy_(torch.eye(H * dv))
    values: dict[int, torch.Tensor] = {}
    outputs: dict[int, torch.Tensor] = {}
    handles, removers = [], []
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    try:
        for b in an.blocks:
            def norm_hook(mod, args, out):
                return replace_first(out, probe.to(device, dtype).expand_as(first_tensor(out)).clone())

            def handler(call, proceed, i=b.index):
                values[i] = call.value[0].float().cpu()  # (n_kv, n, dv)
                return heads_out.to(call.query.device, call.query.dtype), None

            def attn_hook(mod, args, out, i=b.index):
                outputs[i] = first_tensor(out)[0].float().cpu()  # (n, d)

            handles.append(b.attn_norm.register_forward_hook(norm_hook))
            handles.append(b.attn.register_forward_hook(attn_hook))
            removers.append(add_attention_handler(b.attn, handler))
        model(input_ids=torch.zeros(1, n, dtype=torch.long, device=device), use_cache=False)
    finally:
        for h in handles:
            h.remove()
        for r in removers:
            r()
    out = []
    for b in an.blocks:
        v = values[b.index]
        w_v = (v[:, 1 : d + 1] - v[:, :1]).contiguous()  # (n_kv, d, dv)
        o = outputs[b.index]
        w_o = (o[1 : H * dv + 1] - o[:1]).reshape(H, dv, d)
        out.append((w_v, w_o))
    return out


OV_NORMS = ("gain", "none")


@torch.no_grad()
def sphere_gain(model: nn.Module, layer: int) -> torch.Tensor:
    """The attention pre-norm of ``layer`` on unit directions as a diagonal (d,) float64: RMSNorm's
    γ / sqrt(1/d + ε), read by applying the module to a unit vector; LayerNorm's γ·√d (centring dropped)."""
    an = anatomy(model)
    d = an.d_model
    norm = an.blocks[layer].attn_norm
    p = next(model.parameters())
    if an.spec.norm_kind == "rmsnorm":
        e = torch.full((1, d), 1.0 / math.sqrt(d), device=p.device, dtype=p.dtype)
        return norm(e)[0].double().cpu() * math.sqrt(d)
    return norm.weight.detach().double().cpu() * math.sqrt(d)


def head_ov(w_v: torch.Tensor, w_o: torch.Tensor, head: int, n_rep: int) -> torch.Tensor:
    """V_h as a (d, d) matrix acting on column vectors: V_h x = W_O,hᵀ W_V,gᵀ x, g = head // n_rep."""
    return (w_v[head // n_rep] @ w_o[head]).T


def _eig_reading(ev: torch.Tensor, index: torch.Tensor) -> tuple[complex, bool]:
    """The eigenvalue ``ev[index]`` and whether it is real (|Im| ≤ 1e-6 |λ|) and > 0."""
    lam = complex(ev[index].item())
    return lam, abs(lam.imag) <= 1e-6 * max(abs(lam), 1e-30) and lam.real > 0


def ov_rows(model: nn.Module, ov_norm: str = "none") -> list[dict]:
    """Tidy per-head rows: skew/sym ratio, dominant eigenvalue (largest modulus) and its sign, and the
    eigenvalue of largest real part (``dominant_by_real_positive``: it is real and > 0). ``ov_norm``:
    ``none`` (the map from the normed input) or ``gain`` (the pre-norm's :func:`sphere_gain` folded in)."""
    if ov_norm not in OV_NORMS:
        raise GeosteerError(f"unknown ov_norm '{ov_norm}'; valid: {', '.join(OV_NORMS)}")
    an = anatomy(model)
    rows = []
    for layer, (w_v, w_o) in enumerate(ov_weights(model)):
        gain = sphere_gain(model, layer) if ov_norm == "gain" else torch.ones(an.d_model, dtype=torch.float64)
        for h in range(an.n_heads):
            g = h // an.n_rep
            V = head_ov(w_v, w_o, h, an.n_rep).double() * gain[None, :]
            ratio = (0.5 * (V - V.T)).norm() / (0.5 * (V + V.T)).norm().clamp_min(1e-30)
            # The non-zero eigenvalues of V = A B (A = W_O,hᵀ, B = W_V,gᵀ diag(gain)) are those of the small
            # (dv, dv) matrix B A, whose transpose is W_O,h diag(gain) W_V,g: eig(AB) \ {0} = eig(BA) \ {0}.
            small = w_o[h].double() @ (gain[:, None] * w_v[g].double())  # (dv, dv)
            ev = torch.linalg.eigvals(small)
            top, top_pos = _eig_reading(ev, ev.abs().argmax())
            top_re, re_pos = _eig_reading(ev, ev.real.argmax())  # "dominant" read as the largest real part
            rows.append({
                "layer": layer, "head": h, "kv_head": g, "ov_norm": ov_norm, "skew_sym_ratio": ratio.item(),
                "dominant_real": top.real, "dominant_imag": top.imag, "dominant_positive": top_pos,
                "max_real_part": top_re.real, "max_real_imag": top_re.imag, "dominant_by_real_positive": re_pos,
            })
    return rows


def ov_summary(rows: list[dict]) -> dict:
    """Mean skew/sym ratio and the fraction of heads whose dominant eigenvalue is real and positive."""
    n = len(rows)
    return {
        "heads": n,
        **({"ov_norm": rows[0]["ov_norm"]} if n and "ov_norm" in rows[0] else {}),
        "skew_sym_ratio_mean": sum(r["skew_sym_ratio"] for r in rows) / n,
        "frac_dominant_positive": sum(r["dominant_positive"] for r in rows) / n,
        "frac_max_real_positive": sum(r["max_real_part"] > 0 for r in rows) / n,
        "frac_dominant_by_real_positive": sum(r["dominant_by_real_positive"] for r in rows) / n,
    }
