"""Geosteer recipes as per-layer operations that a serving engine applies to flat token batches.

A recipe is built exactly as on the Hugging Face path (``InterventionSpec.build`` on a weightless copy of
the model: same validation, same artifact loading, same base-model checks); the interventions it returns
are then read into :class:`LayerOps` per layer, in the order geosteer attaches them. Nothing here imports
vLLM: the engine-side code (``geosteer.serve.layers``) calls these operations on (tokens, d) tensors.

Supported: residual-space directional scaling (``attn_out``, ``mlp_out``, ``resid_post``),
``value_full`` (per head or concatenated, head selections), FFN variants, gates, gains, parallel layers,
attention surfaces and exact walls (exact, through extra value channels; see ``geosteer.serve.layers`` and
``geosteer.serve.walls``). Anything else is refused with one line naming the setting, never approximated.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from geosteer.errors import GeosteerError
from geosteer.serve.walls import WallOp, wall_op

# fn(tensor, state, positions) -> tensor; state holds this layer's resid_pre / attn_out / mlp_in rows
HookFn = Callable[[torch.Tensor, dict, torch.Tensor], torch.Tensor]


@dataclass
class SurfaceOp:
    """One layer's surfaces: coefficients (H, d, K, K) and the grid."""

    coeff: torch.Tensor
    grid_size: int
    lo: float
    hi: float

    @property
    def K(self) -> int:  # noqa: N802 - the paper's symbol
        return self.grid_size + 3


@dataclass
class ValueScaleOp:
    """``value_full`` component scaling of the attention aggregate against each token's own value."""

    s_par: float
    s_perp: float
    heads: list[int] | None
    concat: bool


@dataclass
class LayerOps:
    """What one recipe does on one layer, in attach order per point."""

    attention: list = field(default_factory=list)  # SurfaceOp | ValueScaleOp | WallOp, outermost first
    attn_out: list[HookFn] = field(default_factory=list)
    mlp_in: list[HookFn] = field(default_factory=list)
    mlp_out: list[HookFn] = field(default_factory=list)
    resid_post: list[HookFn] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.attention or self.attn_out or self.mlp_in or self.mlp_out or self.resid_post)

    def surface(self) -> SurfaceOp | None:
        return next((op for op in self.attention if isinstance(op, SurfaceOp)), None)

    def walls(self) -> list:
        """The walls (``serve.walls.WallOp``) among the attention operations."""
        return [op for op in self.attention if isinstance(op, WallOp)]


@dataclass
class RecipePlan:
    name: str
    source: str
    layers: dict[int, LayerOps]


def spec_of(folder: str | Path):
    """The ``InterventionSpec`` of a recipe folder, or of a surfaces/gates artifact folder used as one."""
    from geosteer.recipe import InterventionSpec, load_recipe

    folder = Path(folder)
    cfg = folder / "geosteer_config.json"
    if not cfg.is_file():
        raise GeosteerError(f"recipe {folder}: not a geosteer recipe or artifact folder (no geosteer_config.json)")
    try:
        fmt = json.loads(cfg.read_text(encoding="utf-8")).get("format")
    except (json.JSONDecodeError, AttributeError) as e:
        raise GeosteerError(f"recipe {folder}: unreadable geosteer_config.json ({e})") from None
    if fmt == "geosteer-surfaces":
        return InterventionSpec(surfaces=str(folder)), None
    if fmt in ("geosteer-gates", "geosteer-gates-v0"):
        return InterventionSpec(gates=str(folder)), None
    if fmt != "geosteer-recipe":
        raise GeosteerError(f"recipe {folder}: format '{fmt}' cannot be served; valid: a recipe, surfaces or "
                            "gates folder")
    spec, doc = load_recipe(folder)
    return spec, doc.get("base_model")


def meta_model(hf_config) -> nn.Module:
    """A weightless (``meta``) Hugging Face model of ``hf_config``: what the recipe builders inspect."""
    from transformers import AutoModelForCausalLM

    from geosteer.serve.families import served_family

    served_family(hf_config.model_type)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(hf_config)


def plan_recipe(name: str, folder: str | Path, model: nn.Module) -> RecipePlan:
    """Build the recipe at ``folder`` on ``model`` (a :func:`meta_model`) and read it into layer ops."""
    from geosteer.artifacts import check_base_model
    from geosteer.models.anatomy import anatomy
    from geosteer.models.loading import model_id

    spec, base = spec_of(folder)
    check_base_model(base, model_id(model), what=f"recipe '{name}' ({folder})")
    layers: dict[int, LayerOps] = {i: LayerOps() for i in range(anatomy(model).n_layers)}
    rep = anatomy(model).n_rep
    for inter in spec.build(model):
        _read(inter, layers, rep)
    return RecipePlan(name, str(folder), {i: ops for i, ops in layers.items() if not ops.empty()})


def _read(inter, layers: dict[int, LayerOps], rep: int) -> None:
    from geosteer.directional.sites import ComponentScale
    from geosteer.dynamics.gates import FFNGates
    from geosteer.dynamics.variants import FFNVariant, Gains, Parallelize
    from geosteer.manifold.bank import SurfaceBank

    readers = {SurfaceBank: lambda bank, ls: _read_bank(bank, ls, rep), ComponentScale: _read_scale,
               FFNVariant: _read_variant, Gains: _read_gains, Parallelize: _read_parallel, FFNGates: _read_gates}
    reader = readers.get(type(inter))
    if reader is None:
        raise GeosteerError(f"{type(inter).__name__} cannot be served on vLLM; supported: surfaces, scale_site "
                            "resid_*/value_full, mlp_variant, gates, gains, parallel_layers")
    reader(inter, layers)


def _all(layers: dict, chosen) -> list[int]:
    return sorted(layers) if chosen is None else [int(x) for x in chosen]


def _read_bank(bank, layers: dict[int, LayerOps], rep: int) -> None:
    """Surfaces, and exact walls (``serve.walls``; applied after the surfaces, as the bank does)."""
    if not bank.enabled:
        return
    for layer in sorted(set(bank.layers) | {w.layer for w in bank.walls}):
        lw = bank.walls_for(layer) if bank.walls else None
        slot = bank.layers.index(layer) if layer in bank.layers else None
        coeff = None
        if slot is not None and bank._layer_nonzero(slot):  # zero surfaces: the stock layer
            coeff = bank.coefficients[slot].detach().float().clone()
        lo, hi = bank.range_of(layer) if slot is not None else (0.0, 1.0)
        if lw is not None:
            layers[layer].attention.append(wall_op(lw, coeff, bank.grid_size, lo, hi, rep))
        if coeff is not None:
            layers[layer].attention.append(SurfaceOp(coeff, bank.grid_size, lo, hi))


def _read_scale(cs, layers: dict[int, LayerOps]) -> None:
    from geosteer.directional.sites import _scaled_delta

    c = cs.config
    if c.site in ("value_exclude_self", "diag_removal"):
        raise GeosteerError(f"scale_site={c.site} cannot be exact on vLLM (it needs the self-attention weight "
                            "A_tt, which paged attention does not expose); use value_full or a residual site "
                            "(attn_out, mlp_out, resid_post)")
    sp, sq = c.s_par, c.s_perp
    if c.is_neutral:
        return
    for layer in _all(layers, c.layers):
        ops = layers[layer]
        if c.site == "value_full":
            ops.attention.append(ValueScaleOp(sp, sq, c.heads, c.value_space == "concat"))
        elif c.site == "attn_out":
            ops.attn_out.append(lambda a, st, pos: a + _scaled_delta(a, st["resid_pre"], sp, sq))
        elif c.site == "mlp_out":
            ops.mlp_out.append(lambda f, st, pos: f + _scaled_delta(f, st["mlp_in"], sp, sq))
        else:  # resid_post
            ops.resid_post.append(
                lambda y, st, pos: y + _scaled_delta(y - st["resid_pre"], st["resid_pre"], sp, sq))


def _keep_first(fn: HookFn) -> HookFn:
    """Position 0 (each sequence's first token) keeps its stock update, as ``skip_first`` does."""
    def wrapped(t, st, pos):
        return torch.where((pos == 0).unsqueeze(-1), t, fn(t, st, pos))

    return wrapped


def _read_variant(var, layers: dict[int, LayerOps]) -> None:
    from geosteer.dynamics import sphere
    from geosteer.dynamics.variants import REFERENCES

    if var.variant == "full":
        return
    key = REFERENCES[var.reference]
    if var.variant in ("zero", "attn_zero"):
        fn: HookFn = lambda t, st, pos: torch.zeros_like(t)  # noqa: E731
    else:
        split = sphere.radial if var.variant == "radial" else sphere.tangential
        fn = lambda t, st, pos: split(sphere.unit(st[key].to(t.dtype)), t)  # noqa: E731
    if var.skip_first:
        fn = _keep_first(fn)
    point = "attn_out" if var.variant == "attn_zero" else "mlp_out"
    for layer in _all(layers, var.layers):
        getattr(layers[layer], point).append(fn)


def _read_gains(g, layers: dict[int, LayerOps]) -> None:
    for point, gain in (("attn_out", float(g.beta_attn)), ("mlp_out", float(g.alpha_ffn))):
        if gain != 1.0:
            for layer in _all(layers, g.layers):
                getattr(layers[layer], point).append(lambda t, st, pos, gain=gain: t * gain)


def _read_parallel(p, layers: dict[int, LayerOps]) -> None:
    for layer in list(p.layers):
        layers[int(layer)].mlp_in.append(lambda t, st, pos: st["resid_pre"])


def _read_gates(gates, layers: dict[int, LayerOps]) -> None:
    alpha = gates.alpha.detach().float().clone()
    for i, layer in enumerate(gates.layers):
        layers[layer].mlp_out.append(lambda t, st, pos, a=alpha[i]: t * a.to(t.dtype))


def parse_recipe_args(items: list[str]) -> dict[str, str]:
    """``["name=DIR", ...]`` -> {name: DIR}; names are unique, non-empty, and not a folder path."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, folder = item.partition("=")
        name = name.strip()
        if not sep or not name or not folder:
            raise GeosteerError(f"--recipe needs NAME=DIR (got '{item}')")
        if "/" in name or name in out:
            raise GeosteerError(f"recipe name '{name}' is {'repeated' if name in out else 'not a plain name'}; "
                                "each --recipe needs its own NAME (used as the OpenAI model id)")
        if not Path(folder).is_dir():
            raise GeosteerError(f"recipe '{name}': folder not found: {folder}")
        out[name] = str(Path(folder).resolve())
    return out
