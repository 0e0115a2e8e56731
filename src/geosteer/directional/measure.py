"""Read-only measurement of the directional decomposition in one forward pass (paper Sections 3-4).

Residual space per layer: ``attn`` (A vs x), ``mlp`` (Φ vs ``mlp_in``), ``block`` (x' − x vs x). Value space
per layer and head: ``o_*`` (o_t vs v_t, Eq. 8), ``c_*`` (c_t = o_t − A_tt·v_t vs v_t, Eq. 9), ``a_self``
= A_tt, ``d_norm`` = A_tt‖v_t‖; ``value_space="concat"`` uses the concatenated heads (one row per layer).
Only running sums are kept (``RunningStats``); padding is left out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from geosteer.attention import attach_handlers, stock_attention_with_lse
from geosteer.directional.config import DEFAULT_VALUE_SPACE, check_value_space, parse_layers
from geosteer.directional.decompose import PAIR_STATS, RunningStats, pair_stats
from geosteer.directional.value import (
    grouped_output,
    own_values,
    sees_only_itself,
    self_weight,
    self_weight_from_lse,
)
from geosteer.errors import GeosteerError
from geosteer.eval.perplexity import encode
from geosteer.hooks import HookSet, attach_hooks
from geosteer.interventions import steer
from geosteer.models.anatomy import anatomy
from geosteer.models.limits import check_positions
from geosteer.models.loading import input_device

RESIDUAL_SITES = ("attn", "mlp", "block")
VALUE_STATS = tuple(f"o_{s}" for s in PAIR_STATS) + tuple(f"c_{s}" for s in PAIR_STATS) + ("a_self", "d_norm")
_AGGS = ("mean", "std", "min", "max")
_PARTIAL = ("ratio", "abs_cos")  # may be undefined on some tokens: rows carry their own count


class DirectionalMeasure:
    """Intervention that changes nothing and accumulates per-layer summaries.

    ``per_step=True`` closes a summary after every model call (one per generation step with a KV cache)
    and starts a new one; ``rows()`` then carries a ``step`` column.
    """

    def __init__(self, layers: Sequence[int] | None = None, residual: bool = True, value: bool = True,
                 per_step: bool = False, value_space: str = DEFAULT_VALUE_SPACE) -> None:
        self.layers = layers
        self.residual = residual
        self.value = value
        self.per_step = per_step
        self.value_space = check_value_space(value_space)
        self._acc: dict[tuple, RunningStats] = {}
        self._steps: list[list[dict]] = []
        self._mask: torch.Tensor | None = None
        self._n_rep = 1

    # -- accumulation ---------------------------------------------------------------------------
    def _token_mask(self, b: int, q: int, device) -> torch.Tensor:
        m = self._mask
        if m is not None and m.shape[0] == b and m.shape[1] >= q:
            return m[:, -q:].to(device)
        return torch.ones(b, q, dtype=torch.bool, device=device)

    def _add(self, key: tuple, values: torch.Tensor, mask: torch.Tensor) -> None:
        acc = self._acc.get(key)
        if acc is None:
            acc = self._acc[key] = RunningStats()
        acc.update(values, mask)

    def _residual_fn(self, site: str, ref_key: str | None):
        def fn(y, ctx):
            x = ctx.state["resid_pre"] if ref_key is None else ctx.state[ref_key]
            delta = y - x if site == "block" else y
            st = pair_stats(delta, x)
            vals = torch.stack([st[k] for k in PAIR_STATS], dim=-1)  # (b, q, n_stats)
            self._add((ctx.layer, site), vals, self._token_mask(y.shape[0], y.shape[1], y.device))
            return None

        return fn

    def _value_handler(self, layer: int):
        def handler(call, proceed):
            fused = stock_attention_with_lse(call) if getattr(proceed, "stock_next", False) else None
            if fused is not None:  # the stock kernel itself, with its row log-sum-exp
                out, w = fused[0], None
            else:
                out, w = proceed(call)
            with torch.no_grad():
                o = grouped_output(out, call).float()
                v = own_values(call).float()
                a = self_weight(call) if fused is None else self_weight_from_lse(call, fused[1])
                alone = sees_only_itself(call)  # (b|1, q): c_t is zero there, its direction undefined
                if self.value_space == "concat":
                    self._add_concat(layer, o, v.expand(o.shape), a, alone)
                    return out, w
                c = o - a[..., None] * v
                so, sc = pair_stats(o, v), _undefined_where(pair_stats(c, v, scale=o.norm(dim=-1)),
                                                            alone[:, None, None])
                cols = [so[k] for k in PAIR_STATS] + [sc[k] for k in PAIR_STATS]
                cols += [a, a * v.norm(dim=-1)]
                b, hkv, r, q = a.shape
                vals = torch.stack([t.expand(b, hkv, r, q) for t in cols], dim=-1)  # (b, Hkv, r, q, S)
                vals = vals.reshape(b, hkv * r, q, -1).permute(0, 2, 1, 3)  # (b, q, H, S)
                self._add((layer, "value"), vals, self._token_mask(b, q, vals.device))
            return out, w

        return handler

    def _add_concat(self, layer: int, o: torch.Tensor, v: torch.Tensor, a: torch.Tensor,
                    alone: torch.Tensor) -> None:
        """Statistics of the concatenated heads: o, v (b, Hkv, r, q, dv), A_tt (b, Hkv, r, q) and the queries
        that see only themselves (b|1, q), whose c_t is zero by construction."""
        b, q = o.shape[0], o.shape[3]

        def cat(t: torch.Tensor) -> torch.Tensor:  # (b, Hkv, r, q, dv) → (b, q, H·dv)
            return t.permute(0, 3, 1, 2, 4).reshape(b, q, -1)

        d = a[..., None] * v
        oc, vc, dc = cat(o), cat(v), cat(d)
        cc = oc - dc
        so, sc = pair_stats(oc, vc), _undefined_where(pair_stats(cc, vc, scale=oc.norm(dim=-1)), alone)
        vv = (vc * vc).sum(-1)
        a_eff = torch.where(vv > 0, (dc * vc).sum(-1) / vv.clamp_min(1e-30), torch.zeros_like(vv))
        cols = [so[k] for k in PAIR_STATS] + [sc[k] for k in PAIR_STATS] + [a_eff, dc.norm(dim=-1)]
        vals = torch.stack(cols, dim=-1)[:, :, None]  # (b, q, 1, S)
        self._add((layer, "value"), vals, self._token_mask(b, q, vals.device))

    # -- attach / results -----------------------------------------------------------------------
    def attach(self, model: nn.Module) -> Callable[[], None]:
        an = anatomy(model)
        layers = an.check_layers(self.layers)
        self._n_rep = an.n_rep
        hooks = HookSet()

        def pre(mod, args, kwargs):
            m = kwargs.get("attention_mask")
            self._mask = m.bool() if isinstance(m, torch.Tensor) and m.dim() == 2 else None

        def post(mod, args, out):
            if self.per_step:
                self._steps.append(self._summary_rows())
                self._acc = {}

        hooks.add_handle(model.register_forward_pre_hook(pre, with_kwargs=True))
        hooks.add_handle(model.register_forward_hook(post))
        try:
            if self.residual:
                hooks.add_handle(attach_hooks(model, "attn_out", layers, self._residual_fn("attn", None)))
                hooks.add_handle(attach_hooks(model, "mlp_out", layers, self._residual_fn("mlp", "mlp_in")))
                hooks.add_handle(attach_hooks(model, "resid_post", layers, self._residual_fn("block", None)))
            if self.value:
                hooks.add_handle(attach_handlers(model, layers, self._value_handler))
        except Exception:
            hooks.remove()
            raise
        return hooks.remove

    def reset(self) -> None:
        self._acc = {}
        self._steps = []

    def _summary_rows(self) -> list[dict]:
        rows = []
        for (layer, site), acc in sorted(self._acc.items(), key=lambda kv: (kv[0][0], kv[0][1])):
            s = acc.summary()
            lists = {k: (v.tolist() if torch.is_tensor(v) else v) for k, v in s.items()}  # one copy, no per-item
            if site == "value":
                concat = self.value_space == "concat"
                for h in range(len(lists["mean"])):
                    row = {"layer": layer, "space": "value", "site": "value", "value_space": self.value_space,
                           "head": None if concat else h, "kv_head": None if concat else h // self._n_rep,
                           "n_tokens": s["n"]}
                    for j, name in enumerate(VALUE_STATS):
                        for agg in _AGGS:
                            row[f"{name}_{agg}"] = float(lists[agg][h][j])
                        if name.endswith(_PARTIAL):
                            row[f"{name}_n"] = int(lists["count"][h][j])
                    rows.append(row)
            else:
                row = {"layer": layer, "space": "residual", "site": site, "n_tokens": s["n"]}
                for j, name in enumerate(PAIR_STATS):
                    for agg in _AGGS:
                        row[f"{name}_{agg}"] = float(lists[agg][j])
                    if name.endswith(_PARTIAL):
                        row[f"{name}_n"] = int(lists["count"][j])
                rows.append(row)
        return rows

    def rows(self) -> list[dict]:
        """Tidy rows: one per (layer, residual site) and per (layer, head) in value space."""
        if not self.per_step:
            return self._summary_rows()
        out = []
        for step, rows in enumerate(self._steps):
            out += [{"step": step, **r} for r in rows]
        return out



def _undefined_where(stats: dict[str, torch.Tensor], zero: torch.Tensor) -> dict[str, torch.Tensor]:
    """``stats`` with the direction statistics (ratio, |cos|) NaN (left out) where ``zero`` (broadcast)."""
    out = dict(stats)
    for k in _PARTIAL:
        out[k] = torch.where(zero.to(out[k].device), torch.full_like(out[k], float("nan")), out[k])
    return out


def _layer_list(model: nn.Module, layers) -> list[int] | None:

    return parse_layers(layers, anatomy(model).n_layers) if isinstance(layers, str) else layers


@torch.no_grad()
def measure_text(model: nn.Module, tok, text: str, *, tokens: int = 512, chunk: int = 512,
                 layers: str | Sequence[int] | None = None, value: bool = True,
                 value_space: str = DEFAULT_VALUE_SPACE) -> tuple[list[dict], dict]:
    """Measure the first ``tokens`` tokens of ``text`` (BOS first) in forwards of ``chunk`` tokens."""

    if tokens < 1 or chunk < 1:
        raise GeosteerError(f"--tokens and --chunk must be >= 1 (got {tokens}, {chunk})")
    if not text.strip():
        raise GeosteerError("text is empty")
    ids = encode(tok, text)[:tokens]
    check_positions(model, min(chunk, len(ids)), "window (tokens per forward pass)")
    meas = DirectionalMeasure(_layer_list(model, layers), value=value, value_space=value_space)
    device = input_device(model)
    with steer(model, meas):
        for i in range(0, len(ids), chunk):
            model(input_ids=ids[None, i:i + chunk].to(device), use_cache=False)
    return meas.rows(), {"tokens": int(len(ids)), "chunk": chunk, "value": value, "value_space": value_space}


@torch.no_grad()
def measure_generation(model: nn.Module, tok, prompt: str, *, max_new_tokens: int = 32,
                       layers: str | Sequence[int] | None = None, value: bool = True,
                       value_space: str = DEFAULT_VALUE_SPACE) -> tuple[list[dict], dict]:
    """Greedy generation with one summary per model call (paper Figure 1): step 0 is the prompt, step
    s ≥ 1 the single token fed at generation step s (KV cache)."""

    if max_new_tokens < 1:
        raise GeosteerError(f"--max-new-tokens must be >= 1 (got {max_new_tokens})")
    enc = tok(prompt, return_tensors="pt")
    if enc.input_ids.shape[1] == 0:
        raise GeosteerError("prompt is empty")
    device = input_device(model)
    meas = DirectionalMeasure(_layer_list(model, layers), value=value, per_step=True, value_space=value_space)
    with steer(model, meas):
        out = model.generate(**{k: v.to(device) for k, v in enc.items()}, max_new_tokens=max_new_tokens,
                             do_sample=False, pad_token_id=tok.pad_token_id)
    new = out[0, enc.input_ids.shape[1]:]
    return meas.rows(), {"prompt": prompt, "generated": tok.decode(new, skip_special_tokens=True),
                         "steps": len(meas._steps), "value": value, "value_space": value_space}
