"""vLLM's Llama classes with geosteer recipes inside (registered as ``GeosteerLlamaForCausalLM``).

Decoder layers: a layer that no loaded recipe touches runs vLLM's own forward. A steered layer spells out
the two-tensor carry: vLLM passes (hidden, residual) with the block input x = hidden + residual (a fused
add inside the norm); here x, the attention update A, the MLP's residual input x + A and the MLP update Φ
are explicit, each recipe's hooks run on its own token rows in geosteer's attach order, and the layer
returns (Φ, x + A) — or (x', 0) after a ``resid_post`` edit — so the next layer's fused add sees x'.

Attention surfaces, exact: every KV head is carried as C channels with the same key k and the values
v, v⊙B_0(k), …, v⊙B_{K-1}(k) (per distinct surface grid), and every query head is repeated C times. vLLM's
stock paged attention then returns A·v and F_b = A·(v⊙B_b(k)) with the stock weights A, and a per-query
epilogue adds Σ_a B_a(q) Σ_b C_dab F_b (``geosteer.manifold.kernel``'s factored form). The KV cache of such a
layer is C times the stock one.
"""

from __future__ import annotations

from functools import partial

import torch
from vllm.config import get_current_vllm_config
from vllm.model_executor.layers.attention import Attention
from vllm.model_executor.models.llama import LlamaAttention, LlamaDecoderLayer, LlamaForCausalLM
from vllm.model_executor.models.utils import extract_layer_index

from geosteer.directional.sites import _scaled_delta
from geosteer.errors import GeosteerError
from geosteer.manifold.bspline import bspline_basis
from geosteer.serve import batch
from geosteer.serve.plan import LayerOps, RecipePlan, SurfaceOp, ValueScaleOp, meta_model, plan_recipe


def _grids(ops: list[LayerOps | None]) -> list[tuple[int, float, float]]:
    """The distinct surface grids (grid_size, lo, hi) of one layer over the recipes, in first-seen order."""
    out: list[tuple[int, float, float]] = []
    for o in ops:
        s = o.surface() if o is not None else None
        if s is not None and (s.grid_size, s.lo, s.hi) not in out:
            out.append((s.grid_size, s.lo, s.hi))
    return out


class SteeredLlamaAttention(LlamaAttention):
    """Llama attention that runs the recipes' attention operations; with surfaces, its KV heads carry the
    channels of ``grids`` (see the module docstring)."""

    def __init__(self, *, grids: list[tuple[int, float, float]], **kwargs) -> None:
        super().__init__(**kwargs)
        if self.num_heads != self.total_num_heads:
            raise GeosteerError("surfaces and value_full on vLLM need tensor_parallel_size=1 (their per-head "
                                "parameters are not split across ranks yet)")
        self.grids = grids
        self.offsets = []
        c = 1
        for g, _, _ in grids:
            self.offsets.append(c)
            c += g + 3
        self.channels = c
        self.ops: list[LayerOps | None] = []  # set by the decoder layer
        if c == 1:
            return  # attention operations without surfaces: the stock attention layer
        # replace the stock attention layer (same name, so the KV cache binds to this one)
        name = self.attn.layer_name
        del get_current_vllm_config().compilation_config.static_forward_context[name]
        self.attn = Attention(self.num_heads * c, self.head_dim, self.scaling, num_kv_heads=self.num_kv_heads * c,
                              cache_config=kwargs.get("cache_config"), quant_config=kwargs.get("quant_config"),
                              prefix=name)

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor) -> torch.Tensor:
        qkv, _ = self.qkv_proj(hidden_states)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q, k = self.rotary_emb(positions, q, k)
        n, hkv, d, c = q.shape[0], self.num_kv_heads, self.head_dim, self.channels
        rep = self.num_heads // hkv
        kh, vh = k.view(n, hkv, d), v.view(n, hkv, d)
        rows = self._feature_rows(n)
        if rows is None:
            vx = self._value_channels(kh, vh)
        else:  # rows without surfaces never read their extra channels: v stands in, no key features
            vx = vh.unsqueeze(2).expand(n, hkv, c, d)
            if rows.numel():
                vx = vx.index_copy(0, rows, self._value_channels(kh[rows], vh[rows]))
        vx = vx.reshape(n, hkv * c * d)
        kx = kh.unsqueeze(2).expand(n, hkv, c, d).reshape(n, hkv * c * d)
        qx = q.view(n, hkv, 1, rep, d).expand(n, hkv, c, rep, d).reshape(n, hkv * c * rep * d)
        o = self.attn(qx, kx, vx).view(n, hkv, c, rep, d)
        out = o[:, :, 0].reshape(n, self.num_heads, d)
        out = _attention_ops(self, out, o, q.view(n, self.num_heads, d), vh)
        output, _ = self.o_proj(out.reshape(n, self.num_heads * d))
        return output


    def _value_channels(self, kh: torch.Tensor, vh: torch.Tensor) -> torch.Tensor:
        """(n, hkv, C, d): v, then v ⊙ B_a(k) for each grid's basis functions a."""
        chans = [vh.unsqueeze(2)]
        for g, lo, hi in self.grids:  # (n, hkv, K, d)
            chans.append((vh.unsqueeze(-1) * bspline_basis(kh.float(), g, lo, hi).to(vh.dtype)).transpose(2, 3))
        return torch.cat(chans, dim=2)

    def _feature_rows(self, n: int) -> torch.Tensor | None:
        """The token rows whose recipe has surfaces on this layer (None: every row)."""
        need = [rows for r, rows in batch.groups(n).items()
                if r < len(self.ops) and self.ops[r] is not None and self.ops[r].surface() is not None]
        if any(rows is None for rows in need):
            return None
        return torch.cat(need) if need else torch.empty(0, dtype=torch.long)


def _attention_ops(attn, out, o, q, v) -> torch.Tensor:
    """Each recipe's attention operations on its rows, innermost (last attached) first."""
    for r, rows in batch.groups(out.shape[0]).items():
        ops = attn.ops[r] if r < len(attn.ops) else None
        if ops is None or not ops.attention:
            continue
        sel = slice(None) if rows is None else rows
        y = out[sel]
        for op in reversed(ops.attention):
            if isinstance(op, SurfaceOp):
                y = y + _surface_delta(attn, op, o[sel], q[sel])
            else:
                y = _value_scale(op, y, v[sel])
        if rows is None:
            out = y
        else:
            out = out.index_copy(0, rows, y)
    return out


def _surface_delta(attn, op: SurfaceOp, o, q) -> torch.Tensor:
    """Δo (n, H, d) = Σ_a B_a(q) Σ_b C_dab F_b from this grid's channels of the attention output."""
    off = attn.offsets[attn.grids.index((op.grid_size, op.lo, op.hi))]
    n, hkv, _, rep, d = o.shape
    f = o[:, :, off:off + op.K].permute(0, 1, 3, 4, 2).reshape(n, hkv * rep, d, op.K)  # (n, H, d, K)
    coeff = op.coeff.to(device=q.device, dtype=torch.float32)
    qf = torch.einsum("nhda,hdab->nhdb", bspline_basis(q.float(), op.grid_size, op.lo, op.hi), coeff)
    return (f.float() * qf).sum(-1).to(o.dtype)


def _value_scale(op: ValueScaleOp, y: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``value_full``: o_t scaled ∥/⊥ against the token's own value v_t (per head, or concatenated)."""
    n, h, d = y.shape
    hkv = v.shape[1]
    o = y.float().view(n, hkv, h // hkv, d)
    ref = v.float().unsqueeze(2)
    if op.concat:
        new = o + _scaled_delta(o.reshape(n, h * d), ref.expand(o.shape).reshape(n, h * d), op.s_par,
                                op.s_perp).view(o.shape)
    else:
        new = o + _scaled_delta(o, ref, op.s_par, op.s_perp)
    if op.heads is not None:
        keep = torch.ones(h, dtype=torch.bool, device=y.device)
        keep[op.heads] = False
        new = torch.where(keep.view(1, hkv, h // hkv, 1), o, new)
    return new.reshape(n, h, d).to(y.dtype)


def _apply(fns_of, t: torch.Tensor, state: dict, positions: torch.Tensor, ops: list, groups: dict) -> torch.Tensor:
    """Run each recipe's hooks at one point on its own rows."""
    for r, rows in groups.items():
        fns = fns_of(ops[r]) if ops[r] is not None else []
        if not fns:
            continue
        if rows is None:
            for fn in fns:
                t = fn(t, state, positions)
            continue
        sub = t[rows]
        st = {k: x[rows] for k, x in state.items()}
        for fn in fns:
            sub = fn(sub, st, positions[rows])
        t = t.index_copy(0, rows, sub)
    return t


class SteeredLlamaDecoderLayer(LlamaDecoderLayer):
    """A Llama decoder layer that applies the loaded recipes' operations of its layer (module docstring)."""

    def __init__(self, vllm_config, prefix: str = "", plans: list[RecipePlan] = (), **kwargs) -> None:
        layer = extract_layer_index(prefix)
        self.recipe_ops = [p.layers.get(layer) for p in plans]
        grids = _grids(self.recipe_ops)
        in_attention = any(o is not None and o.attention for o in self.recipe_ops)
        attn_type = partial(SteeredLlamaAttention, grids=grids) if in_attention else LlamaAttention
        super().__init__(vllm_config=vllm_config, prefix=prefix, attn_layer_type=attn_type, **kwargs)
        if in_attention:
            self.self_attn.ops = self.recipe_ops
        self.steered = any(o is not None for o in self.recipe_ops)

    def forward(self, positions, hidden_states, residual):
        groups = batch.groups(hidden_states.shape[0]) if self.steered else {}
        groups = {r: rows for r, rows in groups.items() if self.recipe_ops[r] is not None}
        if not groups and not isinstance(self.self_attn, SteeredLlamaAttention):
            return super().forward(positions, hidden_states, residual)
        ops = self.recipe_ops
        x = hidden_states if residual is None else hidden_states + residual
        a = self.self_attn(positions=positions, hidden_states=self.input_layernorm(x))
        state = {"resid_pre": x}
        a = _apply(lambda o: o.attn_out, a, state, positions, ops, groups)
        state["attn_out"] = a
        h = x + a
        m = _apply(lambda o: o.mlp_in, h, {**state, "mlp_in": h}, positions, ops, groups)
        state["mlp_in"] = m
        phi = self.mlp(self.post_attention_layernorm(m))
        phi = _apply(lambda o: o.mlp_out, phi, state, positions, ops, groups)
        if not any(ops[r] is not None and ops[r].resid_post for r in groups):
            return phi, h
        state["mlp_out"] = phi
        y = _apply(lambda o: o.resid_post, h + phi, state, positions, ops, groups)
        return y, torch.zeros_like(y)


class GeosteerLlamaForCausalLM(LlamaForCausalLM):
    """``LlamaForCausalLM`` whose decoder layers apply the recipes named in the config's ``geosteer_recipes``
    ({name: folder}); ``geosteer_model_name`` is the base-model name the recipes are checked against."""

    def __init__(self, *, vllm_config, prefix: str = "") -> None:
        cfg = vllm_config.model_config.hf_config
        recipes = dict(getattr(cfg, "geosteer_recipes", None) or {})
        meta = meta_model(cfg)
        meta.config._geosteer_name = getattr(cfg, "geosteer_model_name", None)
        plans = [plan_recipe(name, folder, meta) for name, folder in recipes.items()]
        batch.set_recipes([p.name for p in plans])
        super().__init__(vllm_config=vllm_config, prefix=prefix,
                         layer_type=partial(SteeredLlamaDecoderLayer, plans=plans))
