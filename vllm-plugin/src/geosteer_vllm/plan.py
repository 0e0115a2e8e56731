"""Geosteer recipes as per-layer operations that a serving engine applies to flat token batches.

A recipe is built as on the Hugging Face path (``InterventionSpec.build`` on a weightless model); each
intervention declares its operations through ``served_ops`` (``geosteer.served``), in attach order; one
that cannot be served is refused in one line. Walls are compiled here (``serve.walls``). No vLLM import.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from geosteer.errors import GeosteerError
from geosteer.served import LayerOps, ServedOps, Surface, Walls, declare
from geosteer_vllm.walls import WallOp, wall_op

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # a recipe's name: an OpenAI model id
NAME_RULE = "1-128 letters, digits, '.', '_' or '-', starting with a letter or digit"


@dataclass
class RecipePlan:
    """One recipe's operations per steered layer; ``key`` identifies what it computes (the prefix-cache salt)."""

    name: str
    source: str
    layers: dict[int, LayerOps]
    key: str = field(default="")
    prompt_dependent: bool = False  # some operation treats prompt and generated tokens apart

    @property
    def neutral(self) -> bool:
        return not self.layers

    @property
    def attention_layers(self) -> list[int]:
        return sorted(i for i, ops in self.layers.items() if ops.attention)


def surface_of(ops: LayerOps | None) -> Surface | None:
    """The layer's surfaces among its attention operations."""
    return None if ops is None else next((op for op in ops.attention if isinstance(op, Surface)), None)


def walls_of(ops: LayerOps | None) -> list[WallOp]:
    """The layer's exact walls (engine form) among its attention operations."""
    return [] if ops is None else [op for op in ops.attention if isinstance(op, WallOp)]


def spec_of(folder: str | Path):
    """The ``InterventionSpec`` of a recipe folder, or of a surfaces/gates artifact folder used as one, and
    the base model the recipe records (None for an artifact)."""
    from geosteer.recipe import InterventionSpec, load_recipe

    folder = Path(folder)
    cfg = folder / "geosteer_config.json"
    if not cfg.is_file():
        raise GeosteerError(f"recipe {folder}: not a geosteer recipe or artifact folder (no geosteer_config.json)")
    try:
        fmt = json.loads(cfg.read_text(encoding="utf-8")).get("format")
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as e:
        raise GeosteerError(f"recipe {folder}: unreadable geosteer_config.json ({e})") from None
    if fmt == "geosteer-surfaces":
        return InterventionSpec(surfaces=str(folder)), None
    if fmt in ("geosteer-gates", "geosteer-gates-v0"):
        return InterventionSpec(gates=str(folder)), None
    if fmt == "geosteer-vectors":
        return InterventionSpec(vectors=str(folder)), None
    if fmt != "geosteer-recipe":
        raise GeosteerError(f"recipe {folder}: format '{fmt}' cannot be served; valid: a recipe, surfaces, gates "
                            "or steering-vectors folder")
    spec, doc = load_recipe(folder)
    return spec, doc.get("base_model")


def meta_model(hf_config) -> nn.Module:
    """A weightless (``meta``) Hugging Face model of ``hf_config``: what the recipe builders inspect."""
    from transformers import AutoModelForCausalLM

    from geosteer_vllm.families import served_family

    served_family(hf_config.model_type)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(hf_config)


def plan_recipe(name: str, folder: str | Path, model: nn.Module) -> RecipePlan:
    """Build the recipe at ``folder`` on ``model`` (a :func:`meta_model`) and read it into layer ops."""
    from geosteer.artifacts import check_base_model
    from geosteer.models.loading import model_id

    spec, base = spec_of(folder)
    check_base_model(base, model_id(model), what=f"recipe '{name}' ({folder})")
    return plan_spec(name, spec, model, str(folder), key=f"named:{name}:{Path(folder).resolve()}")


def plan_spec(name: str, spec, model: nn.Module, source: str, key: str) -> RecipePlan:
    """Build ``spec`` (an ``InterventionSpec``) on ``model`` and ask each intervention for its operations."""
    from geosteer.models.anatomy import anatomy

    an = anatomy(model)
    ops = ServedOps(an.n_layers, an.n_rep, an.d_model)
    for inter in spec.build(model):
        declare(inter, ops)
    layers = {i: _engine_form(o, an.n_rep) for i, o in ops.layers.items() if not o.empty()}
    return RecipePlan(name, source, layers, hashlib.sha256(key.encode()).hexdigest()[:32], ops.prompt_dependent)


def _engine_form(ops: LayerOps, rep: int) -> LayerOps:
    """``ops`` with its walls compiled for vLLM's paged attention (``serve.walls``)."""
    ops.attention = [wall_op(op.layer_walls, op.coeff, op.grid_size, op.lo, op.hi, rep) if isinstance(op, Walls)
                     else op for op in ops.attention]
    return ops


def parse_recipe_args(items: list[str], base: str | None = None) -> dict[str, str]:
    """``["name=DIR", ...]`` -> {name: DIR}; names are unique, non-empty, not a folder path and not the base
    model's name ``base`` (which names the stock model)."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, folder = item.partition("=")
        name = name.strip()
        if not sep or not name or not folder:
            raise GeosteerError(f"--recipe needs NAME=DIR (got '{item}')")
        if not NAME.fullmatch(name) or name in out:
            why = "repeated" if name in out else f"not a plain name ({NAME_RULE})"
            raise GeosteerError(f"recipe name {name[:80]!r} is {why}; each --recipe needs its own NAME (used as "
                                "the OpenAI model id)")
        if base is not None and name == base:
            raise GeosteerError(f"recipe name '{name}' is the base model's id, which names the stock model; "
                                "give the recipe another NAME")
        if not Path(folder).is_dir():
            raise GeosteerError(f"recipe '{name}': folder not found: {folder}")
        out[name] = str(Path(folder).resolve())
    return out
