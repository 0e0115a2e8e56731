"""Independent computations the formula checks (``geosteer study checks``) and the tests compare against:
naive loops, numpy linear algebra, central finite differences and plain torch module hooks. None of them
calls the code it checks; they use the library only to find modules or to materialise attention weights."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from geosteer.attention import add_attention_handler, attention_weights, repeat_kv
from geosteer.models.anatomy import anatomy


def keep_mask(b: int, L: int, T: int, pad: Sequence[int], window: int | None = None) -> torch.Tensor:
    """(b, 1, L, T) boolean keep mask: ``pad[r]`` left-padded keys in row r, causal with the L queries aligned
    to the last of the T keys, and a sliding window of ``window`` keys if given."""
    i = torch.arange(L)[:, None] + (T - L)
    j = torch.arange(T)[None, :]
    m = j <= i
    if window is not None:
        m = m & (j > i - window)
    m = m[None, None].repeat(b, 1, 1, 1)
    for r, p in enumerate(pad):
        m[r, :, :, :p] = False
    return m


def capture_call(model, layer: int, ids: torch.Tensor, mask: torch.Tensor | None = None):
    """The :class:`~geosteer.attention.AttentionCall` that ``layer``'s attention receives in one stock forward
    of ``ids`` (no grad), for a reference to recompute from."""
    calls = []
    rm = add_attention_handler(anatomy(model).blocks[layer].attn, lambda c, p: (calls.append(c), p(c))[1])
    try:
        with torch.no_grad():
            model(input_ids=ids, attention_mask=mask)
    finally:
        rm()
    return calls[0]


def per_pair_handlers(model, bank) -> list[Callable[[], None]]:
    """Attention handlers computing o = Σ_j a_ij v_jd (1 + S_d(q_id, k_jd)) pair by pair from the stock
    weights (masks included) for every layer of ``bank``; returns their removers."""
    from geosteer.kernels.exact import naive_modulated_attention

    an = anatomy(model)
    removers = []
    for slot, layer in enumerate(bank.layers):
        def handler(call, proceed, slot=slot):
            w = attention_weights(call)
            lo, hi = float(bank.lo[slot]), float(bank.hi[slot])
            out = naive_modulated_attention(w, call.query, call.key, call.value,
                                            bank.coefficients[slot].detach(), bank.grid_size, lo, hi)
            return out.contiguous(), None

        removers.append(add_attention_handler(an.blocks[layer].attn, handler))
    return removers


def value_edit_loop(call, site: str, s_par: float, s_perp: float) -> torch.Tensor:
    """The per-head value-space edit (Eqs. 7–11) by a loop over batch, head and query on the materialised
    weights, in float64: (b, H, q, dv). ``site``: value_full, value_exclude_self or diag_removal."""
    W = attention_weights(call)  # (b, H, q, k)
    v = repeat_kv(call.value, call.n_rep)
    b, H, q, k = W.shape
    off = k - q
    out = torch.zeros(b, H, q, v.shape[-1], dtype=torch.float64)
    for i in range(b):
        for h in range(H):
            vv = v[i, h].double()
            for t in range(q):
                w, vt = W[i, h, t].double(), v[i, h, t + off].double()
                if site == "diag_removal":
                    w = w.clone()
                    w[t + off] = 0
                    out[i, h, t] = (w @ vv) / w.sum() if w.sum() > 0 else 0
                    continue
                y = w @ vv
                d = w[t + off] * vt if site == "value_exclude_self" else torch.zeros_like(vt)
                c = y - d
                par = (c @ vt) / (vt @ vt) * vt
                out[i, h, t] = d + s_par * par + s_perp * (c - par)
    return out


def projection_coefficients(d: np.ndarray, z: np.ndarray) -> np.ndarray:
    """α of d ≈ α z per row by numpy least squares (rows of (n, dim) arrays)."""
    return np.array([np.linalg.lstsq(z[i][:, None], d[i], rcond=None)[0][0] for i in range(d.shape[0])])


def tangential_numpy(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """(I − u uᵀ) v for every row (last axis the vector), with the projector built as a matrix."""
    flat_u, flat_v = u.reshape(-1, u.shape[-1]), v.reshape(-1, v.shape[-1])
    eye = np.eye(u.shape[-1])
    out = np.stack([(eye - np.outer(a, a)) @ b for a, b in zip(flat_u, flat_v, strict=True)])
    return out.reshape(v.shape)


def finite_difference_tangent_jacobian(field, u: torch.Tensor, basis: torch.Tensor, h: float = 1e-5) -> torch.Tensor:
    """Central differences of v ↦ Bᵀ F((u + B v)/‖u + B v‖) at v = 0: the tangent Jacobian of the flow on
    the sphere in the coordinates of ``basis`` (d × (d−1))."""
    n = basis.shape[1]
    J = torch.empty(n, n, dtype=torch.float64)

    def G(v):
        x = u + basis @ v
        return basis.T @ field((x / x.norm())[None])[0]

    for k in range(n):
        e = torch.zeros(n, dtype=torch.float64)
        e[k] = h
        J[:, k] = (G(e) - G(-e)) / (2 * h)
    return J


def parallel_speedup_loop(times: list[dict], layers: Sequence[int]) -> float:
    """T_seq / T_par by an explicit loop: a parallelised layer costs max(T_A, T_Φ), another T_A + T_Φ."""
    t_seq = t_par = 0.0
    for t in times:
        a, f = t["t_attn"], t["t_ffn"]
        t_seq += a + f
        t_par += (a if a >= f else f) if t["layer"] in layers else a + f
    return t_seq / t_par


def attn_out_scaled_by_plain_hooks(model, layer: int, input_ids: torch.Tensor, s_par: float,
                                   s_perp: float) -> torch.Tensor:
    """Logits with the residual attention update A of ``layer`` replaced by s∥ A∥ + s⊥ A⊥ against the
    block input x (A∥ = (Aᵀx / xᵀx) x), recomputed with plain torch forward hooks on the block and on the
    module whose output is the update."""
    block = anatomy(model).blocks[layer]
    store: dict[str, torch.Tensor] = {}

    def pre(mod, args, kwargs):
        store["x"] = (args[0] if args else kwargs["hidden_states"]).detach()

    def post(mod, args, out):
        a = out[0] if isinstance(out, tuple) else out
        x = store["x"]
        alpha = (a * x).sum(-1, keepdim=True) / (x * x).sum(-1, keepdim=True)
        new = s_par * alpha * x + s_perp * (a - alpha * x)
        return (new, *out[1:]) if isinstance(out, tuple) else new

    handles = [block.layer.register_forward_pre_hook(pre, with_kwargs=True),
               block.attn_update.register_forward_hook(post)]
    try:
        return model(input_ids=input_ids).logits
    finally:
        for h in handles:
            h.remove()
