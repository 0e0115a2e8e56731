"""Geosteer recipes inside vLLM's own decoder layers, for every served family (eager path).

:func:`install` replaces the forward of each steered layer with the explicit two-tensor carry (x, A, x + A,
Φ from ``models.anatomy.FAMILIES``), each recipe's hooks on its own rows, returning (Φ, x + A) or (x', 0).
Surfaces take the shared-key path (``serve.shared_key``: CPU, float32, compiled kernels, no exact walls)
or the channel layout (:class:`ChannelAttention`: each KV head carried as v, v⊙B_0(k), …, v⊙B_{K−1}(k),
then the epilogue Σ_a B_a(q) Σ_b C_dab F_b; walls add channels, ``serve.walls``; ``GEOSTEER_SERVE_CHANNELS=1``).
"""

from __future__ import annotations

import os
import types

import torch
from vllm.config import get_current_vllm_config
from vllm.forward_context import get_forward_context
from vllm.model_executor.layers.attention import Attention

from geosteer.errors import GeosteerError
from geosteer.models.anatomy import FAMILIES
from geosteer.served import LayerOps, Surface, ValueScale, scaled_delta
from geosteer_vllm import batch, capture, shared_key, surface_ops
from geosteer_vllm.plan import RecipePlan, surface_of, walls_of
from geosteer_vllm.tensor_parallel import ConcatOverRanks
from geosteer_vllm.walls import WallOp, apply_walls, wall_values


def _grids(ops: list[LayerOps | None]) -> list[tuple[int, float, float]]:
    """The distinct surface grids (grid_size, lo, hi) of one layer over the recipes, in first-seen order."""
    out: list[tuple[int, float, float]] = []
    for o in ops:
        s = surface_of(o)
        if s is not None and (s.grid_size, s.lo, s.hi) not in out:
            out.append((s.grid_size, s.lo, s.hi))
    return out


class ChannelAttention(Attention):
    """vLLM's attention layer with the recipes' attention operations; with surfaces, its KV heads carry the
    channels of ``grids`` (module docstring). Built in place of the stock layer ``stock``, same name."""

    def __init__(self, stock: Attention, ops: list[LayerOps | None], layer: int, shared: bool = False) -> None:
        self.ops = ops  # the start recipes' operations on this layer (they decide the channels)
        self.layer_index = layer
        self.shared_key = shared  # surfaces through serve.shared_key: no surface channels
        self.grids = [] if shared else _grids(ops)
        self.offsets = []
        c = 1
        for g, _, _ in self.grids:
            self.offsets.append(c)
            c += g + 3
        self.heads, self.kv_heads, self.head_dim = stock.num_heads, stock.num_kv_heads, stock.head_size
        self.walls = [w for o in ops for w in walls_of(o)]  # each recipe's own channels
        self.wall_offsets = []
        for w in self.walls:
            self.wall_offsets.append(c)
            c += w.channels(self.head_dim)
        self.channels = c
        name = stock.layer_name
        config = get_current_vllm_config()
        del config.compilation_config.static_forward_context[name]  # the KV cache binds to this one
        soft_cap = getattr(stock.impl, "logits_soft_cap", None) or None
        super().__init__(stock.num_heads * c, stock.head_size, stock.impl.scale, num_kv_heads=stock.num_kv_heads * c,
                         cache_config=config.cache_config, quant_config=stock.quant_config,
                         logits_soft_cap=soft_cap, per_layer_sliding_window=stock.sliding_window,
                         attn_type=stock.attn_type, prefix=name)

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        n, hkv, d, c = query.shape[0], self.kv_heads, self.head_dim, self.channels
        rep = self.heads // hkv
        q = query.reshape(n, self.heads, d)
        kh, vh = key.reshape(n, hkv, d), value.reshape(n, hkv, d)
        if c == 1:
            o = super().forward(query, key, value).view(n, hkv, 1, rep, d)
        else:
            rows = self._feature_rows(n)
            if rows is None:
                vx = self._channels(kh, vh)
            else:  # rows without surfaces or walls never read their extra channels: v stands in
                vx = vh.unsqueeze(2).expand(n, hkv, c, d)
                if rows.numel():
                    vx = vx.index_copy(0, rows, self._channels(kh[rows], vh[rows]))
            vx = vx.reshape(n, hkv * c * d)
            kx = kh.unsqueeze(2).expand(n, hkv, c, d).reshape(n, hkv * c * d)
            qx = q.view(n, hkv, 1, rep, d).expand(n, hkv, c, rep, d).reshape(n, hkv * c * rep * d)
            o = super().forward(qx, kx, vx).view(n, hkv, c, rep, d)
        out = o[:, :, 0].reshape(n, self.heads, d)
        out = apply_attention_ops(self, out, o, q, vh)
        return out.reshape(n, self.heads * d)

    def _channels(self, kh: torch.Tensor, vh: torch.Tensor) -> torch.Tensor:
        """(n, hkv, C, d): the surface channels, then each recipe's wall channels (``serve.walls``)."""
        chans = [self._value_channels(kh, vh)]
        chans += [wall_values(w, kh, vh, self.head_dim) for w in self.walls]
        return torch.cat(chans, dim=2) if len(chans) > 1 else chans[0]

    def _value_channels(self, kh: torch.Tensor, vh: torch.Tensor) -> torch.Tensor:
        """(n, hkv, C, d): v, then v ⊙ B_a(k) for each grid's basis functions a."""
        return surface_ops.value_channels(kh, vh, self.grids)

    def _feature_rows(self, n: int) -> torch.Tensor | None:
        """The token rows whose recipe has surfaces or walls on this layer (None: every row)."""
        need = [rows for r, rows in batch.groups(n).items()
                if surface_of(batch.ops(r, self.layer_index)) is not None or walls_of(batch.ops(r, self.layer_index))]
        if any(rows is None for rows in need):
            return None
        return torch.cat(need) if need else torch.empty(0, dtype=torch.long)


def apply_attention_ops(attn, out, o, q, v) -> torch.Tensor:
    """Each recipe's attention operations on its rows, innermost (last attached) first."""
    for r, rows in batch.groups(out.shape[0]).items():
        ops = batch.ops(r, attn.layer_index)
        if ops is None or not ops.attention:
            continue
        sel = slice(None) if rows is None else rows
        y = out[sel]
        for op in reversed(ops.attention):
            if isinstance(op, Surface) and attn.shared_key:
                y = y + _shared_key_delta(attn, op, q[sel], rows, out.shape[0])
            elif isinstance(op, Surface):
                y = y + _surface_delta(attn, op, o[sel], q[sel])
            elif isinstance(op, WallOp):
                off = attn.wall_offsets[next(i for i, w in enumerate(attn.walls) if w is op)]
                y = apply_walls(op, y, o[sel][:, :, off:off + op.channels(attn.head_dim)], q[sel])
            else:
                y = _value_scale(op, y, v[sel])
        if rows is None:
            out = y
        else:
            out = out.index_copy(0, rows, y)
    return out


def _surface_delta(attn, op: Surface, o, q) -> torch.Tensor:
    """Δo (n, H, d) = Σ_a B_a(q) Σ_b C_dab F_b from this grid's channels of the attention output."""
    off = attn.offsets[attn.grids.index((op.grid_size, op.lo, op.hi))]
    return surface_ops.surface_delta(o[:, :, off:off + op.K], q, op.coeff, (op.grid_size, op.lo, op.hi))


def _shared_key_delta(attn, op: Surface, q, rows, n: int) -> torch.Tensor:
    """Δo (len(rows), H, d) of the surfaces from the stock paged KV cache (``serve.shared_key``)."""
    meta = get_forward_context().attn_metadata
    meta = meta[attn.layer_name] if isinstance(meta, dict) else meta
    if getattr(attn, "isa", None) not in shared_key.LAYOUTS:
        raise GeosteerError(f"the shared-key surfaces path reads vLLM's CPU cache layouts {shared_key.LAYOUTS}, "
                            f"not '{getattr(attn, 'isa', None)}'; set GEOSTEER_SERVE_CHANNELS=1")
    rows = torch.arange(n, device=q.device) if rows is None else rows
    impl = attn.impl
    return shared_key.surface_delta(op, q, rows, meta, attn.kv_cache, scale=impl.scale,
                                    softcap=impl.logits_soft_cap or None, window=impl.sliding_window)


def shared_key_layer(attn: Attention, ops: list[LayerOps | None]) -> bool:
    """Whether this surfaces layer takes the shared-key path (module docstring)."""
    if os.environ.get("GEOSTEER_SERVE_CHANNELS") == "1" or any(walls_of(o) for o in ops):
        return False
    if not any(surface_of(o) is not None for o in ops):
        return False
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return False
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    config = get_current_vllm_config()
    dtype, cache = config.model_config.dtype, config.cache_config
    isa = _get_attn_isa(dtype, cache.block_size or 128, attn.head_size, cache.cache_dtype)  # 128: the CPU default
    return shared_key.supported(True, dtype, cache.cache_dtype, isa) and shared_key.compiled_available()


def _value_scale(op: ValueScale, y: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``value_full``: o_t scaled ∥/⊥ against the token's own value v_t (per head, or concatenated)."""
    n, h, d = y.shape
    hkv = v.shape[1]
    o = y.float().view(n, hkv, h // hkv, d)
    ref = v.float().unsqueeze(2)
    if op.concat:
        fn = _scaled_over_ranks if isinstance(op, ConcatOverRanks) else scaled_delta
        new = o + fn(o.reshape(n, h * d), ref.expand(o.shape).reshape(n, h * d), op.s_par, op.s_perp).view(o.shape)
    else:
        new = o + scaled_delta(o, ref, op.s_par, op.s_perp)
    if op.heads is not None:
        keep = torch.ones(h, dtype=torch.bool, device=y.device)
        keep[op.heads] = False
        new = torch.where(keep.view(1, hkv, h // hkv, 1), o, new)
    return new.reshape(n, h, d).to(y.dtype)


def _scaled_over_ranks(y: torch.Tensor, ref: torch.Tensor, s_par: float, s_perp: float) -> torch.Tensor:
    """``scaled_delta`` of the concatenation over the tensor-parallel ranks, from this rank's part of it:
    the dot products ⟨ref, ref⟩ and ⟨y, ref⟩ of each token are summed over the ranks."""
    from vllm.distributed import tensor_model_parallel_all_reduce

    return scaled_delta(y, ref, s_par, s_perp, reduce=tensor_model_parallel_all_reduce)


def _apply(point: str, t: torch.Tensor, state: dict, tokens, ops: dict) -> torch.Tensor:
    """Run each recipe's edits at ``point`` on its own rows (``ops``: {group: (rows, LayerOps)}); a recipe
    whose edit fails leaves its rows as they were (``batch.failed``), the others go on."""
    for r, (rows, o) in ops.items():
        fns = getattr(o, point)
        if not fns:
            continue
        try:
            t = _edits(fns, t, state, tokens, rows)
        except Exception as e:  # noqa: BLE001 - one recipe's rows, not the engine's step
            batch.failed(f"recipe '{batch.plan(r).name}' at {point}", e)
    return t


def _edits(fns: list, t: torch.Tensor, state: dict, tokens, rows: torch.Tensor | None) -> torch.Tensor:
    if rows is None:
        for fn in fns:
            t = fn(t, state, tokens)
        return batch.bounded(t)
    sub = t[rows]
    st = _Rows(state, rows)
    tok = tokens[rows]
    for fn in fns:
        sub = fn(sub, st, tok)
    return t.index_copy(0, rows, batch.bounded(sub))


class _Rows(dict):
    """``state`` restricted to ``rows``, each entry selected when first read."""

    def __init__(self, state: dict, rows: torch.Tensor) -> None:
        super().__init__()
        self.state, self.rows = state, rows

    def __missing__(self, key: str) -> torch.Tensor:
        self[key] = self.state[key][self.rows]
        return self[key]

    def __contains__(self, key: object) -> bool:
        return key in self.state


def _part(layer, path: str):
    for name in path.split("."):
        layer = getattr(layer, name)
    return layer


def steered_forward(layer, positions, hidden_states, residual, **kwargs):
    """A steered decoder layer's forward (module docstring); bound to the layer by :func:`install`."""
    i, spec = layer.layer_index, layer.block_spec
    ops = {r: (rows, o) for r, rows in batch.groups(hidden_states.shape[0]).items()
           if (o := batch.ops(r, i)) is not None}
    captured = bool(batch.captures(i))
    if not ops and not layer.channel_attention and not captured:
        return type(layer).forward(layer, positions, hidden_states, residual, **kwargs)
    tokens = batch.tokens(positions)
    x = hidden_states if residual is None else hidden_states + residual
    x = _point("resid_pre", i, x, {}, tokens, ops, captured)
    attn = _part(layer, spec.attn)
    kwargs.pop("t_cond", None)  # Mistral's time conditioning (absent: None; present: refused by install)
    a = attn(positions=positions, hidden_states=_part(layer, spec.attn_norm)(x), **kwargs)
    if spec.attn_update != spec.attn:
        a = _part(layer, spec.attn_update)(a)
    state = {"resid_pre": x}
    a = _point("attn_out", i, a, state, tokens, ops, captured)
    state["attn_out"] = a
    h = x + a
    m = _point("mlp_in", i, h, {**state, "mlp_in": h}, tokens, ops, captured)
    state["mlp_in"] = m
    phi = _part(layer, spec.mlp)(_part(layer, spec.mlp_norm)(m))
    if spec.mlp_update != spec.mlp:
        phi = _part(layer, spec.mlp_update)(phi)
    phi = _point("mlp_out", i, phi, state, tokens, ops, captured)
    if not any(o.resid_post for _, o in ops.values()):
        if captured and batch.captures(i, "resid_post"):
            _capture(i, "resid_post", h + phi, tokens)
        return phi, h
    state["mlp_out"] = phi
    y = _point("resid_post", i, h + phi, state, tokens, ops, captured)
    return y, torch.zeros_like(y)


def _point(point: str, i: int, t, state: dict, tokens, ops: dict, captured: bool):
    """The recipes' edits at ``point`` of layer ``i``, then this step's captures of it."""
    t = _apply(point, t, state, tokens, ops)
    if captured:
        _capture(i, point, t, tokens)
    return t


def _capture(i: int, point: str, t, tokens) -> None:
    """Write the captured rows of ``t`` (``serve.capture``): a request's rows, its prompt's only if asked."""
    for token, which, a, b in batch.captures(i, point):
        pos, vals = tokens.positions[a:b], t[a:b]
        if which == "prompt":
            keep = tokens.in_prompt[a:b]
            pos, vals = pos[keep], vals[keep]
        if pos.numel():
            try:
                capture.record(batch.capture_dir(), token, i, pos, vals)
            except (OSError, GeosteerError) as e:  # the request's capture comes back incomplete (a one-line error)
                batch.failed(f"the capture of layer {i} to {batch.capture_dir()}", e)


def install(model, model_type: str, plans: list[RecipePlan], every_layer: bool = False) -> None:
    """Steer the decoder layers of the built vLLM model ``model`` with ``plans`` (the recipes loaded at start;
    ``batch.set_recipes`` holds them). ``every_layer``: every layer can be steered by recipes that arrive
    later (inline recipes: residual operations only), not just those the loaded recipes touch."""
    spec = FAMILIES[model_type]
    inner = _part(model, spec.layers.rsplit(".", 1)[0])
    for i in range(inner.start_layer, inner.end_layer):
        layer = inner.layers[i]
        ops = [p.layers.get(i) for p in plans]
        if all(o is None for o in ops) and not every_layer:
            continue
        if getattr(layer, "ada_rms_norm_t_cond", None) is not None:
            raise GeosteerError("time-conditioned norms (ada_rms_norm_t_cond) cannot be steered on vLLM; serve "
                                "this model without recipes")
        layer.layer_index, layer.block_spec = i, spec
        layer.channel_attention = any(o is not None and o.attention for o in ops)
        if layer.channel_attention:
            attn = _part(layer, spec.attn)
            attn.attn = ChannelAttention(attn.attn, ops, i, shared=shared_key_layer(attn.attn, ops))
        layer.forward = types.MethodType(steered_forward, layer)
