"""Model anatomy: one canonical view of a decoder block for every supported family (the ``FAMILIES`` table).

Sequential: x → A = attn_update(attn(attn_norm(x))) → m = x + A → Φ = mlp_update(mlp(mlp_norm(m))) → x' = m + Φ;
parallel (GPT-NeoX): x' = x + A(attn_norm(x)) + Φ(mlp_norm(x)). No code elsewhere branches on ``model_type``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from geosteer.errors import LayerSpecError, UnsupportedArchitecture


@dataclass(frozen=True)
class FamilySpec:
    """Where the parts of a decoder block live for one architecture family.

    Paths are dotted attribute paths. ``layers`` is relative to the CausalLM model; the others are
    relative to one decoder layer. ``attn_update`` / ``mlp_update`` name the module whose *output* is the
    residual update (Gemma3 applies a norm after each branch, so there it is that norm).
    """

    layers: str
    final_norm: str
    attn: str
    attn_norm: str
    mlp: str
    mlp_norm: str
    attn_update: str
    mlp_update: str
    parallel_residual: bool | str = False  # bool, or the name of a config flag that decides it
    norm_kind: str = "rmsnorm"
    extra_norms: tuple[str, ...] = ()
    sliding_window: bool = False
    notes: str = ""


_LLAMA_LIKE = FamilySpec(
    layers="model.layers",
    final_norm="model.norm",
    attn="self_attn",
    attn_norm="input_layernorm",
    mlp="mlp",
    mlp_norm="post_attention_layernorm",
    attn_update="self_attn",
    mlp_update="mlp",
)

FAMILIES: dict[str, FamilySpec] = {
    "llama": _LLAMA_LIKE,
    "qwen2": FamilySpec(**{**_LLAMA_LIKE.__dict__, "sliding_window": True}),
    "qwen3": FamilySpec(**{**_LLAMA_LIKE.__dict__, "notes": "q_norm/k_norm inside attention (pre-RoPE)"}),
    "mistral": FamilySpec(**{**_LLAMA_LIKE.__dict__, "sliding_window": True}),
    "gemma3_text": FamilySpec(
        layers="model.layers",
        final_norm="model.norm",
        attn="self_attn",
        attn_norm="input_layernorm",
        mlp="mlp",
        mlp_norm="pre_feedforward_layernorm",
        attn_update="post_attention_layernorm",
        mlp_update="post_feedforward_layernorm",
        extra_norms=("post_attention_layernorm", "post_feedforward_layernorm"),
        sliding_window=True,
        notes="sandwich norms: the residual updates are the outputs of the post-branch norms",
    ),
    "gpt2": FamilySpec(
        layers="transformer.h",
        final_norm="transformer.ln_f",
        attn="attn",
        attn_norm="ln_1",
        mlp="mlp",
        mlp_norm="ln_2",
        attn_update="attn",
        mlp_update="mlp",
        norm_kind="layernorm",
    ),
    "gpt_neox": FamilySpec(
        layers="gpt_neox.layers",
        final_norm="gpt_neox.final_layer_norm",
        attn="attention",
        attn_norm="input_layernorm",
        mlp="mlp",
        mlp_norm="post_attention_layernorm",
        attn_update="attention",
        mlp_update="mlp",
        parallel_residual="use_parallel_residual",
        norm_kind="layernorm",
    ),
}
FAMILIES["gemma3"] = FAMILIES["gemma3_text"]


def child_named(parent: nn.Module, names: Sequence[str], what: str) -> nn.Module:
    """The first child of ``parent`` under one of its conventional attribute ``names`` (e.g. a projection);
    ``what`` names it in the error when none is there."""
    for name in names:
        mod = getattr(parent, name, None)
        if isinstance(mod, nn.Module):
            return mod
    raise UnsupportedArchitecture(f"no {what} ({', '.join(names)}) on {type(parent).__name__}")


@dataclass
class BlockView:
    """The parts of one decoder layer, as modules."""

    index: int
    layer: nn.Module
    attn: nn.Module
    attn_norm: nn.Module
    mlp: nn.Module
    mlp_norm: nn.Module
    attn_update: nn.Module
    mlp_update: nn.Module
    sliding_window: int | None = None


@dataclass
class Anatomy:
    """Canonical view of a decoder-only model: shapes plus a :class:`BlockView` per layer."""

    model_type: str
    spec: FamilySpec
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    parallel_residual: bool
    blocks: list[BlockView] = field(repr=False)
    final_norm: nn.Module = field(repr=False)

    @property
    def n_rep(self) -> int:
        """GQA group size: query head h reads key/value head h // n_rep (HF ``repeat_kv`` order)."""
        return self.n_heads // self.n_kv_heads

    def kv_head_of(self, head: int) -> int:
        return head // self.n_rep

    def check_layers(self, layers: Sequence[int] | None) -> list[int]:
        """Validate a layer selection (``None`` means all layers): non-empty, no duplicates, in range."""
        if layers is None:
            return list(range(self.n_layers))
        return parse_indices(layers, self.n_layers, "layer")

    def table(self) -> list[dict]:
        """Tidy rows describing the model (one per layer), for ``geosteer info``."""
        rows = []
        for b in self.blocks:
            rows.append(
                {
                    "layer": b.index,
                    "attn": self.spec.attn,
                    "attn_norm": self.spec.attn_norm,
                    "mlp": self.spec.mlp,
                    "mlp_norm": self.spec.mlp_norm,
                    "attn_update": self.spec.attn_update,
                    "mlp_update": self.spec.mlp_update,
                    "residual": "parallel" if self.parallel_residual else "sequential",
                    "sliding_window": b.sliding_window,
                }
            )
        return rows

    def summary(self) -> dict:
        return {
            "model_type": self.model_type,
            "n_layers": self.n_layers,
            "d_model": self.d_model,
            "n_heads": self.n_heads,
            "n_kv_heads": self.n_kv_heads,
            "gqa_group": self.n_rep,
            "head_dim": self.head_dim,
            "residual": "parallel" if self.parallel_residual else "sequential",
            "norm": self.spec.norm_kind,
            "extra_norms": list(self.spec.extra_norms),
            "notes": self.spec.notes,
        }


def _config_get(config, *names, default=None):
    for n in names:
        v = getattr(config, n, None)
        if v is not None:
            return v
    return default


def supported_families() -> list[str]:
    return sorted(k for k in FAMILIES if k != "gemma3")


def unwrap_peft(model: nn.Module) -> nn.Module:
    """The transformers model inside a PEFT wrapper (``get_base_model()``, or ``.model`` of a bare tuner),
    else ``model``; LoRA layers stay in place, so an intervention there sees the adapted weights.
    """
    seen = 0
    while seen < 4:
        seen += 1
        get_base = getattr(type(model), "get_base_model", None)
        if get_base is not None:
            model = model.get_base_model()
            continue
        inner = model.__dict__.get("_modules", {}).get("model")
        if type(model).__module__.startswith("peft.") and inner is not None:
            model = inner
            continue
        break
    return model


def anatomy(model: nn.Module) -> Anatomy:
    """Build (and cache on the model) the canonical view of ``model`` (a PEFT wrapper is unwrapped).

    Raises :class:`UnsupportedArchitecture` naming the model type and the supported ones.
    """
    cached = getattr(model, "_geosteer_anatomy", None)
    if cached is not None:
        return cached
    wrapper, model = model, unwrap_peft(model)
    if model is not wrapper:
        an = anatomy(model)
        wrapper.__dict__["_geosteer_anatomy"] = an
        return an
    config = model.config
    model_type = getattr(config, "model_type", type(model).__name__)
    spec = FAMILIES.get(model_type)
    if spec is None:
        raise UnsupportedArchitecture(
            f"unsupported architecture '{model_type}'; supported: {', '.join(supported_families())}"
        )
    try:
        layers = model.get_submodule(spec.layers)
        final_norm = model.get_submodule(spec.final_norm)
    except AttributeError as e:
        raise UnsupportedArchitecture(
            f"'{model_type}' model lacks the expected module path ({e}); pass a *ForCausalLM model"
        ) from None
    d_model = _config_get(config, "hidden_size", "n_embd")
    n_heads = _config_get(config, "num_attention_heads", "n_head")
    n_kv = _config_get(config, "num_key_value_heads", default=n_heads)
    head_dim = _config_get(config, "head_dim", default=d_model // n_heads)
    parallel = spec.parallel_residual
    if isinstance(parallel, str):
        parallel = bool(getattr(config, parallel, False))
    layer_types = getattr(config, "layer_types", None)
    window = getattr(config, "sliding_window", None)
    blocks = []
    for i, layer in enumerate(layers):
        sw = None
        if spec.sliding_window and window:
            if layer_types is not None and i < len(layer_types):
                sw = window if layer_types[i] == "sliding_attention" else None
            elif layer_types is None:
                sw = window
        blocks.append(
            BlockView(
                index=i,
                layer=layer,
                attn=layer.get_submodule(spec.attn),
                attn_norm=layer.get_submodule(spec.attn_norm),
                mlp=layer.get_submodule(spec.mlp),
                mlp_norm=layer.get_submodule(spec.mlp_norm),
                attn_update=layer.get_submodule(spec.attn_update),
                mlp_update=layer.get_submodule(spec.mlp_update),
                sliding_window=sw,
            )
        )
    an = Anatomy(
        model_type=model_type,
        spec=spec,
        n_layers=len(blocks),
        d_model=int(d_model),
        n_heads=int(n_heads),
        n_kv_heads=int(n_kv),
        head_dim=int(head_dim),
        parallel_residual=parallel,
        blocks=blocks,
        final_norm=final_norm,
    )
    model._geosteer_anatomy = an
    return an


def first_tensor(out) -> torch.Tensor:
    """Modules return a tensor or a tuple whose first element is the tensor; normalise."""
    return out[0] if isinstance(out, (tuple, list)) else out


def replace_first(out, new: torch.Tensor):
    """Put ``new`` where :func:`first_tensor` found the tensor, keeping the container type."""
    if isinstance(out, tuple):
        return (new, *out[1:])
    if isinstance(out, list):
        return [new, *out[1:]]
    return new


MAX_INDICES = 1 << 16  # indices in one list (no model dimension comes near it; bounds the memory a spec costs)
_RANGE = re.compile(r"^(\d+)(?:-|\.\.|–)(\d+)$")


def _checked(out: list[int], n: int | None, shown: str, what: str = "layer") -> list[int]:
    if n is None:
        valid = "indices start at 0"
    else:
        valid = f"this model has layers 0..{n - 1}" if what == "layer" else f"valid 0..{n - 1}"
    if not out:
        raise LayerSpecError(f"empty {what} list {shown}: {valid}" + (" (or 'all')" if what == "layer" else ""))
    bad = [i for i in out if i < 0 or (n is not None and i >= n)]
    if bad:
        raise LayerSpecError(f"{what} {bad[0]} out of range: {valid}")
    dup = sorted({i for i in out if out.count(i) > 1})
    if dup:
        raise LayerSpecError(f"{what} {dup[0]} given twice in {shown}: {valid}")
    return out


def parse_indices(spec: str | int | Sequence[int], n: int | None = None, what: str = "layer") -> list[int]:
    """``"5"``, ``"8-15"``, ``"0,2,5-7"`` (also ``;``/``|``/spaces, ``5..7``), an int or ints → a checked list.

    Refuses an empty list, duplicates, reversed (``"5-3"``) or open (``"3-"``) ranges, non-numbers, and
    indices outside ``0..n-1`` (when ``n`` is given) with a one-line message naming the valid range.
    """
    hint = f" (this model has layers 0..{n - 1})" if n is not None and what == "layer" else ""
    if isinstance(spec, bool):
        raise LayerSpecError(f"bad {what} spec {spec!r}: use e.g. 8-15 or 0,2,5-7{hint}")
    if isinstance(spec, int):
        return _checked([spec], n, repr(spec), what)
    if not isinstance(spec, str):
        try:
            out = [int(i) for i in spec]
        except (TypeError, ValueError):
            raise LayerSpecError(f"bad {what} list {spec!r}: use e.g. [8, 9] or '8-15'") from None
        return _checked(out, n, str(list(spec)), what)
    out = []
    for part in _parts(spec):
        m = _RANGE.match(part)
        if m:
            lo, hi = int(m.group(1)), int(m.group(2))
            if hi < lo:
                raise LayerSpecError(f"reversed {what} range '{part}' in '{spec}' is empty: write {hi}-{lo}{hint}")
            if n is not None and hi >= n:
                _checked([max(lo, n)], n, repr(spec), what)  # the first index out of range, before building
            if hi - lo >= MAX_INDICES:
                raise LayerSpecError(f"{what} range '{part}' is too long (at most {MAX_INDICES} indices)")
            out.extend(range(lo, hi + 1))
        elif part.isdigit():
            out.append(int(part))
        else:
            raise LayerSpecError(f"bad {what} spec '{spec}': '{part}' is not an index or a range like 8-15"
                                 f"{hint}")
        if len(out) > MAX_INDICES:
            raise LayerSpecError(f"'{spec}' lists more than {MAX_INDICES} {what} indices")
    return _checked(out, n, repr(spec), what)


def parse_layers(spec: str | int | Sequence[int] | None, n_layers: int) -> list[int] | None:
    """The one layer-list parser: ``None``/``"all"`` → None (all layers); else a checked, sorted list.

    Accepts ``"8-15"``, ``"0,2,5-7"`` (also ``;``, ``|`` or spaces between parts), an int, or a sequence of
    ints. Refuses, with the valid range in a one-line message: an empty list, duplicates (``"3,3"``,
    ``"0-4,3"``), reversed ranges (``"5-3"``), open ranges (``"3-"``), non-numbers and out-of-range indices.
    """
    if spec is None or (isinstance(spec, str) and spec.strip().lower() == "all"):
        return None
    return sorted(parse_indices(spec, n_layers, "layer"))


def _parts(text: str) -> list[str]:
    """Split on ``,``/``;``/``|``/whitespace, keeping ``a - b`` ranges whole."""
    text = re.sub(r"\s*(-|\.\.|–)\s*", r"\1", text.strip())
    return [p for p in re.split(r"[,;|\s]+", text) if p]
