"""Residual steering inside vLLM's compiled graph: each recipe's edits as rows of per-layer tables.

Before every forward the runner writes each token's recipe row and prompt length into persistent buffers
(:func:`write_rows`); each steered layer runs, per hook point, a fixed number of stages of tensor arithmetic
that gather their parameters by row (row 0 = stock, unchanged). A stage is one edit's closed form
(``geosteer.served.Form``); stage counts are sized at start (:data:`INLINE_STAGES` for inline recipes).
Exact walls, edits without a form, the channel layout, GPU surfaces and captures run eager (docs/serving.md).
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

from geosteer.errors import GeosteerError
from geosteer.served import POINTS, FormEdit
from geosteer_vllm.batch import bounded

INLINE_STAGES = 1  # stages at each point of each layer reserved for inline recipes
SCALED = {"attn_out": ("resid_pre",), "mlp_out": ("resid_pre", "mlp_in"), "resid_post": ("resid_pre",)}
_FIELDS = ("s_par", "s_perp", "ref_mlp", "has_ref", "delta", "vscale", "ablate", "norm_match", "replace",
           "from_token", "phase", "skip_first", "active")  # (stages, rows) each; "vector": (stages, rows, d)
_PHASE = {"all": 0, "prompt": 1, "generation": 2}


def attention_in_graph() -> bool:
    """Whether attention operations (surfaces, ``value_full``) can run in this machine's compiled graph: on
    vLLM's CPU build with the shared-key surfaces path (``serve.graph_attention``); False without vLLM."""
    import os

    try:
        from vllm.platforms import current_platform
    except ImportError:
        return False

    from geosteer_vllm import shared_key

    return (current_platform.is_cpu() and os.environ.get("GEOSTEER_SERVE_CHANNELS") != "1"
            and shared_key.compiled_available())


def why_not(plan, attention: bool = False) -> str | None:
    """Why ``plan`` (a ``RecipePlan``) cannot run in the compiled graph (None: it can); ``attention``: surfaces
    and ``value_full`` can (:func:`attention_in_graph`)."""
    from geosteer.served import Surface, ValueScale

    for layer, ops in plan.layers.items():
        if ops.attention and not attention:
            return f"layer {layer} has operations inside attention (surfaces, walls or value_full)"
        if any(not isinstance(op, Surface | ValueScale) for op in ops.attention):
            return f"layer {layer} has exact walls"
        for point in POINTS:
            for fn in getattr(ops, point):
                if not isinstance(fn, FormEdit):
                    return f"an edit at {point} of layer {layer} declares no closed form"
                bad = _unsupported(point, fn.form)
                if bad:
                    return f"{bad} at {point} of layer {layer}"
    return None


def _unsupported(point: str, form) -> str | None:
    scaled = form.s_par != 1.0 or form.s_perp != 1.0 or form.ref is not None or form.delta
    if scaled and point not in SCALED:
        return "∥/⊥ scaling or a gain"
    if form.ref is not None and form.ref not in SCALED.get(point, ()):
        return f"a reference '{form.ref}'"
    if form.delta and point != "resid_post":
        return "a block-update scaling"
    if form.replace and point != "mlp_in":
        return "replacing by the block input"
    return None


def stages_of(plans, n_layers: int, inline: bool) -> dict[tuple[int, str], int]:
    """{(layer, point): stages} for ``plans`` (the recipes loaded at start) and, with ``inline``, room for
    :data:`INLINE_STAGES` edits of an inline recipe at every point of every layer."""
    out: dict[tuple[int, str], int] = {}
    if inline:
        out = {(i, p): INLINE_STAGES for i in range(n_layers) for p in POINTS}
    for plan in plans:
        for layer, ops in plan.layers.items():
            for p in POINTS:
                n = len(getattr(ops, p))
                if n > out.get((layer, p), 0):
                    out[(layer, p)] = n
    return out


def layout_key(plans, stages: dict, inline: bool) -> str:
    """What a compiled graph of these recipes bakes in (stages per layer and point, the layers with attention
    operations, the table rows): vLLM's compile cache must not hand one layout's graph to another."""
    import hashlib
    import json

    doc = {"stages": sorted([i, p, n] for (i, p), n in stages.items()), "named": len(plans), "inline": inline,
           "attention": sorted({i for p in plans for i in p.attention_layers})}
    return hashlib.sha256(json.dumps(doc).encode()).hexdigest()[:32]


def check_inline(plan, stages: dict) -> None:
    """Refuse an inline recipe that the tables cannot hold (one line)."""
    why = why_not(plan)
    if why is None:
        for layer, ops in plan.layers.items():
            for p in POINTS:
                if len(getattr(ops, p)) > stages.get((layer, p), 0):
                    why = (f"it has {len(getattr(ops, p))} edits at {p} of layer {layer}; this compiled engine "
                           f"runs {stages.get((layer, p), 0)} there")
                    break
    if why is not None:
        raise GeosteerError(f"this inline recipe cannot run in the server's compiled graph: {why}")


class LayerTables(nn.Module):
    """One layer's stage tables, as buffers (the compiled graph reads them; rows are written in place)."""

    def __init__(self, stages: dict[str, int], rows: int, d: int, dtype, device) -> None:
        super().__init__()
        self.stages = {p: n for p, n in stages.items() if n}
        for p, n in self.stages.items():
            for f in _FIELDS:
                kind = torch.long if f in ("from_token", "phase") else (
                    torch.bool if f in ("ref_mlp", "delta", "ablate", "norm_match", "replace", "skip_first",
                                        "active") else dtype)
                self.register_buffer(f"{p}__{f}", torch.zeros(n, rows, dtype=kind, device=device), persistent=False)
            self.register_buffer(f"{p}__vector", torch.zeros(n, rows, d, dtype=dtype, device=device),
                                 persistent=False)
            getattr(self, f"{p}__s_par").fill_(1.0)
            getattr(self, f"{p}__s_perp").fill_(1.0)

    def clear(self, row: int) -> None:
        for p in self.stages:
            getattr(self, f"{p}__active")[:, row] = False

    def write(self, row: int, point: str, stage: int, form) -> None:
        """Stage ``stage`` at ``point`` runs ``form`` (a ``served.Form``) for recipe row ``row``."""
        vals = {"s_par": form.s_par, "s_perp": form.s_perp, "ref_mlp": form.ref == "mlp_in",
                "has_ref": float(form.ref is not None), "delta": form.delta, "vscale": form.scale,
                "ablate": form.ablate, "norm_match": form.norm_match, "replace": form.replace,
                "from_token": form.from_token, "phase": _PHASE[form.phase], "skip_first": form.skip_first,
                "active": True}
        for f, v in vals.items():
            getattr(self, f"{point}__{f}")[stage, row] = v
        vec = getattr(self, f"{point}__vector")
        if form.vector is None:
            vec[stage, row].zero_()
        else:
            vec[stage, row].copy_(form.vector.reshape(-1).to(vec.dtype))

    def run(self, point: str, t: torch.Tensor, state: dict, rows: torch.Tensor, pos: torch.Tensor,
            in_prompt: torch.Tensor) -> torch.Tensor:
        """The stages at ``point`` on every token of the flat batch ``t`` (n, d), kept finite (``batch.bounded``)."""
        if not self.stages.get(point, 0):
            return t
        for s in range(self.stages[point]):
            t = self._stage(point, s, t, state, rows, pos, in_prompt)
        return bounded(t)

    def _stage(self, point, s, t, state, rows, pos, in_prompt):
        def g(f):
            return getattr(self, f"{point}__{f}")[s][rows]

        x = state["resid_pre"]
        y = t
        if point in SCALED:  # y + (s∥ − s⊥)·α·ref + (s⊥ − 1)·u, as geosteer.served.scaled_delta
            ref = x if point != "mlp_out" else torch.where(g("ref_mlp").unsqueeze(-1), state["mlp_in"], x)
            ref = ref * g("has_ref").unsqueeze(-1)
            u = torch.where(g("delta").unsqueeze(-1), t - x, t) if point == "resid_post" else t
            rr = torch.linalg.vecdot(ref, ref)
            alpha = torch.where(rr > 1e-30, torch.linalg.vecdot(u, ref) / rr.clamp_min(1e-30), 0.0)
            sp, sq = g("s_par"), g("s_perp")
            y = t + (((sp - sq) * alpha).unsqueeze(-1) * ref + (sq - 1.0).unsqueeze(-1) * u)
        v = g("vector")  # a vector, as geosteer.vectors.apply.steer_tensor
        norm = v.norm(dim=-1, keepdim=True)
        unit = v / torch.where(norm > 0, norm, 1.0)
        z = torch.where(g("ablate").unsqueeze(-1), y - torch.linalg.vecdot(y, unit).unsqueeze(-1) * unit, y)
        z = z + g("vscale").unsqueeze(-1) * v
        z = torch.where(g("norm_match").unsqueeze(-1),
                        z * (y.norm(dim=-1, keepdim=True) / z.norm(dim=-1, keepdim=True)), z)
        if point == "mlp_in":
            z = torch.where(g("replace").unsqueeze(-1), x, z)
        phase = g("phase")
        keep = g("active") & (pos >= g("from_token")) & ((phase == 0) | ((phase == 1) & in_prompt)
                                                         | ((phase == 2) & ~in_prompt))
        keep = keep & ~(g("skip_first") & (pos == 0))
        return torch.where(keep.unsqueeze(-1), z, t)


class Rows:
    """The per-token buffers and the recipe -> table row assignment of one worker."""

    def __init__(self, max_tokens: int, named: list, inline_rows: int, device) -> None:
        self.rows = torch.zeros(max_tokens, dtype=torch.long, device=device)
        self.prompt_len = torch.zeros(max_tokens, dtype=torch.long, device=device)
        self.named = {id(p): i + 1 for i, p in enumerate(named)}
        self.first_inline = len(named) + 1
        self.size = self.first_inline + inline_rows
        self.inline: OrderedDict = OrderedDict()  # id(plan) -> (row, plan), least recently used first
        self.tables: dict[int, LayerTables] = {}

    def row_of(self, plan, in_use: set[int]) -> int:
        """``plan``'s row, written into every layer's tables when it takes a row."""
        if id(plan) in self.named:
            return self.named[id(plan)]
        if id(plan) in self.inline:
            self.inline.move_to_end(id(plan))
            return self.inline[id(plan)][0]
        if len(self.inline) < self.size - self.first_inline:
            row = self.first_inline + len(self.inline)
        else:
            old = next((k for k, (r, _) in self.inline.items() if r not in in_use), None)
            if old is None:
                raise GeosteerError(f"more than {self.size - self.first_inline} inline recipes in one step")
            row = self.inline.pop(old)[0]
        try:
            self.write(row, plan)
        except BaseException:
            for tab in self.tables.values():  # a row half written is no recipe's
                tab.clear(row)
            raise
        self.inline[id(plan)] = (row, plan)  # the plan is kept so its id is not reused while it holds a row
        return row

    def write(self, row: int, plan) -> None:
        for tab in self.tables.values():
            tab.clear(row)
        for layer, ops in plan.layers.items():
            tab = self.tables.get(layer)
            for p in POINTS:
                for s, fn in enumerate(getattr(ops, p)):
                    if tab is None or s >= tab.stages.get(p, 0):
                        raise GeosteerError(f"recipe '{plan.name}' has more edits at {p} of layer {layer} "
                                            "than this engine's compiled graph runs there")
                    tab.write(row, p, s, fn.form)

    def fill(self, per_request: list[tuple]) -> None:
        """Each token's row and prompt length for ``[(plan or None, n tokens, prompt length, ...), ...]``."""
        ids, plens, counts, in_use = [], [], [], set()
        for plan, n, plen, *_ in per_request:
            try:
                row = 0 if plan is None else self.row_of(plan, in_use)
            except Exception as e:  # noqa: BLE001 - one recipe's rows, not the engine's step
                from geosteer_vllm.batch import failed

                failed(f"recipe '{plan.name}' ({plan.source})", e)
                row = 0
            in_use.add(row)
            ids.append(row)
            plens.append(plen)
            counts.append(n)
        total = sum(counts)
        if total > self.rows.numel():
            raise GeosteerError(f"{total} tokens in one step; the steering buffers hold {self.rows.numel()}")
        self.rows.zero_()
        self.prompt_len.zero_()
        if total:
            c = torch.tensor(counts, dtype=torch.long)
            self.rows[:total].copy_(torch.repeat_interleave(torch.tensor(ids, dtype=torch.long), c))
            self.prompt_len[:total].copy_(torch.repeat_interleave(torch.tensor(plens, dtype=torch.long), c))


def _part(layer, path: str):
    for name in path.split("."):
        layer = getattr(layer, name)
    return layer


def install(model, model_type: str, plans: list, stages: dict, max_tokens: int, inline_rows: int) -> Rows:
    """Tables on each layer of the built vLLM model ``model`` that ``stages`` steers, with the recipes loaded
    at start written in, and :func:`graph_forward` as those layers' forward."""
    import types

    from geosteer.models.anatomy import FAMILIES

    for plan in plans:
        why = why_not(plan, attention=True)
        if why is not None:
            raise GeosteerError(f"recipe '{plan.name}' cannot run in vLLM's compiled graph ({why}); drop "
                                "geosteer_graph from the engine's hf_overrides")
    spec = FAMILIES[model_type]
    inner = _part(model, spec.layers.rsplit(".", 1)[0])
    param = next(model.parameters())
    rows = Rows(max_tokens, plans, inline_rows, param.device)
    for i in range(inner.start_layer, inner.end_layer):
        per_point = {p: stages.get((i, p), 0) for p in POINTS}
        if not any(per_point.values()):
            continue
        layer = inner.layers[i]
        if getattr(layer, "ada_rms_norm_t_cond", None) is not None:
            raise GeosteerError("time-conditioned norms (ada_rms_norm_t_cond) cannot be steered on vLLM; serve "
                                "this model without recipes")
        tab = LayerTables(per_point, rows.size, model.config.hidden_size, param.dtype, param.device)
        tab.register_buffer("rows", rows.rows, persistent=False)
        tab.register_buffer("prompt_len", rows.prompt_len, persistent=False)
        layer.geosteer_tables, layer.block_spec = tab, spec
        rows.tables[i] = tab
        layer.forward = types.MethodType(graph_forward, layer)
    for i in range(inner.start_layer, inner.end_layer):
        ops = [p.layers.get(i) for p in plans]
        if any(o is not None and o.attention for o in ops):
            from geosteer_vllm import graph_attention

            graph_attention.install(_part(inner.layers[i], spec.attn), ops, i)
    for plan in plans:
        rows.write(rows.named[id(plan)], plan)
    model.geosteer_rows = rows
    return rows


def graph_forward(layer, positions, hidden_states, residual, **kwargs):
    """A steered decoder layer's forward from its tables, with the same two-tensor carry as
    ``serve.layers.steered_forward``: (Φ, x + A), or (x', 0) when the layer has ``resid_post`` stages."""
    spec, tab = layer.block_spec, layer.geosteer_tables
    n = hidden_states.shape[0]
    pos = positions if positions.dim() == 1 else positions[0]
    rows, in_prompt = tab.rows[:n], pos < tab.prompt_len[:n]
    x = hidden_states if residual is None else hidden_states + residual
    state = {"resid_pre": x}
    x = tab.run("resid_pre", x, state, rows, pos, in_prompt)
    state["resid_pre"] = x
    kwargs.pop("t_cond", None)
    a = _part(layer, spec.attn)(positions=positions, hidden_states=_part(layer, spec.attn_norm)(x), **kwargs)
    if spec.attn_update != spec.attn:
        a = _part(layer, spec.attn_update)(a)
    a = tab.run("attn_out", a, state, rows, pos, in_prompt)
    h = x + a
    state["mlp_in"] = h
    m = tab.run("mlp_in", h, state, rows, pos, in_prompt)
    state["mlp_in"] = m
    phi = _part(layer, spec.mlp)(_part(layer, spec.mlp_norm)(m))
    if spec.mlp_update != spec.mlp:
        phi = _part(layer, spec.mlp_update)(phi)
    phi = tab.run("mlp_out", phi, state, rows, pos, in_prompt)
    if not tab.stages.get("resid_post"):
        return phi, h
    y = tab.run("resid_post", h + phi, state, rows, pos, in_prompt)
    return y, torch.zeros_like(y)


def write_rows(model, per_request: list[tuple]) -> None:
    """Fill the row buffers of ``model`` (a model runner's model) for this step, if it runs from tables."""
    rows = getattr(model, "geosteer_rows", None)
    if isinstance(rows, Rows):
        rows.fill(per_request)
