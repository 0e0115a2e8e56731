"""Formula checks of paper 3 (``geosteer study checks``): each returns its largest absolute error against an
independent reference (numpy least squares, plain torch hooks, a per-token loop, the stock model)."""

from __future__ import annotations

import numpy as np
import torch

from geosteer.attention import attention_weights, stock_attention
from geosteer_paper.reproduction.references import capture_call

LAYER = 1


def _ids(b: int = 2, t: int = 12, seed: int = 0, pad: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """Random ids in [5, 900) and a mask with ``pad`` tokens of left padding on the first row."""
    ids = torch.randint(5, 900, (b, t), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones_like(ids)
    mask[0, :pad] = 0
    return ids, mask


def projection_vs_numpy() -> float:
    """Eqs. 1–2: d = α z + d⊥ against numpy least squares for α, with d∥ + d⊥ = d and d⊥ ⟂ z, float64."""
    from geosteer.directional.decompose import decompose
    from geosteer_paper.reproduction.references import projection_coefficients

    g = torch.Generator().manual_seed(1)
    d = torch.randn(50, 32, generator=g, dtype=torch.float64)
    z = torch.randn(50, 32, generator=g, dtype=torch.float64)
    alpha, par, perp = decompose(d, z)
    ref = projection_coefficients(d.numpy(), z.numpy())
    return max(np.abs(alpha[:, 0].numpy() - ref).max(), (par + perp - d).abs().max().item(),
               (perp * z).sum(-1).abs().max().item())


def residual_update_vs_plain_hooks(model, tok) -> float:
    """Eqs. 3–5: the attention update of layer 1 scaled (s∥ = −0.5, s⊥ = 1.5) against its block input, by
    the library against the same edit made with plain torch module hooks."""
    from geosteer.directional.sites import ComponentScale
    from geosteer.interventions import steer
    from geosteer_paper.reproduction.references import attn_out_scaled_by_plain_hooks

    ids = torch.randint(5, 900, (1, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = attn_out_scaled_by_plain_hooks(model, LAYER, ids, -0.5, 1.5)
        with steer(model, ComponentScale("attn_out", -0.5, 1.5, layers=[LAYER])):
            got = model(input_ids=ids).logits
    return (got - ref).abs().max().item()


def _value_site_vs_loop(model, site: str) -> float:
    from geosteer.directional.sites import ComponentScale
    from geosteer_paper.reproduction.references import value_edit_loop

    ids, mask = _ids()
    call = capture_call(model, LAYER, ids, mask)
    with torch.no_grad():
        out, _ = ComponentScale(site, 0.25, 1.75)._value_handler()(call, stock_attention)  # (b, q, H, dv)
    ref = value_edit_loop(call, site, 0.25, 1.75).permute(0, 2, 1, 3)
    valid = mask.bool()  # padded query rows carry nothing
    return (out.double() - ref)[valid].abs().max().item()


def value_full_vs_loop(model, tok) -> float:
    """Eqs. 7–8: the per-head value-space edit with reference o_t (s∥ = 0.25, s⊥ = 1.75) against a loop
    over batch, head and query on the materialised weights."""
    return _value_site_vs_loop(model, "value_full")


def exclude_self_vs_loop(model, tok) -> float:
    """Eqs. 9–10: the exclude-self edit (reference c_t = o_t − a_tt v_t) against the same loop."""
    return _value_site_vs_loop(model, "value_exclude_self")


def self_weight_vs_diagonal(model, tok) -> float:
    """Eq. 9's a_tt computed in row blocks against the diagonal of the materialised attention matrix."""
    from geosteer.directional.value import self_weight

    ids, mask = _ids(t=20, pad=5)
    call = capture_call(model, LAYER, ids, mask)
    diag = torch.diagonal(attention_weights(call), dim1=-2, dim2=-1)
    return (self_weight(call, block_rows=7).reshape(diag.shape) - diag).abs().max().item()


def neutral_vs_stock(model, tok) -> float:
    """Eq. 11 at s∥ = s⊥ = 1 on every site with a neutral setting: logits against the stock model's."""
    from geosteer.directional.config import SITES
    from geosteer.directional.sites import ComponentScale
    from geosteer.interventions import steer

    ids, mask = _ids(t=24, pad=4)
    worst = 0.0
    with torch.no_grad():
        base = model(input_ids=ids, attention_mask=mask).logits
        for site in SITES[:-1]:  # diag_removal is a control with no neutral setting
            with steer(model, ComponentScale(site, 1.0, 1.0)):
                out = model(input_ids=ids, attention_mask=mask).logits
            worst = max(worst, (out - base).abs().max().item())
    return worst


def diagonal_form_vs_edit(model, tok) -> float:
    """Eq. 12, Table 5: Ã = A + diag(ΔA) applied to the values against the value handler's edited output,
    both sites, s∥ ∈ {0, 0.4, 2.5}, per-head and concatenated value spaces."""
    from geosteer.directional.sites import ComponentScale
    from geosteer_paper.directional.diagonal import diagonal_edited_output, value_diagonal_change

    ids, mask = _ids(t=16)
    call = capture_call(model, LAYER, ids, mask)
    valid = mask.bool()
    worst = 0.0
    for space in ("head", "concat"):
        for site in ("value_full", "value_exclude_self"):
            for s_par in (0.0, 0.4, 2.5):
                delta, w = value_diagonal_change(call, site, s_par, space)
                with torch.no_grad():
                    out, _ = ComponentScale(site, s_par, 1.0, value_space=space)._value_handler()(
                        call, stock_attention)
                err = (out.double() - diagonal_edited_output(call, delta, w))[valid].abs().max().item()
                worst = max(worst, err)
    return worst
