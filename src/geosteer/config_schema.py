"""Typed, bounded reading of artifact configs (``geosteer_config.json``): one pydantic schema per format.

:func:`read_config_json` caps size and nesting; :func:`validate_config` checks a document against
:data:`SCHEMAS` in strict mode (integers are integers, numbers finite and bounded, layer lists unique,
sorted, in range). Unknown keys pass here (:func:`geosteer.artifacts.check_config` warns).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError, model_validator

from geosteer.errors import ArtifactError
from geosteer.formats import CONFIG_NAME, MAX_CONFIG_BYTES
from geosteer.readers import ReadRefused, parse_json, read_text

MAX_DEPTH = 64
MAX_LAYERS = 100_000

Count = Annotated[StrictInt, Field(ge=1, le=1_000_000)]
Index = Annotated[StrictInt, Field(ge=0, le=MAX_LAYERS - 1)]
Size = Annotated[StrictInt, Field(ge=0, le=1 << 48)]
Finite = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=-1e9, le=1e9)]
Name = Annotated[StrictStr, Field(min_length=1, max_length=4096)]
Layers = Annotated[list[Index], Field(min_length=1, max_length=MAX_LAYERS)]
Digest = Annotated[StrictStr, Field(pattern=r"^[0-9a-f]{64}$")]
Pair = Annotated[list[Finite], Field(min_length=2, max_length=2)]  # JSON arrays: lists, not tuples


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class Header(_Open):
    """What every artifact config starts with."""

    format: Name
    version: Annotated[StrictInt, Field(ge=1, le=1_000_000)] = 1


def _check_layers(layers: list[int] | None, n_layers: int | None, what: str = "layers") -> None:
    if layers is None:
        return
    if len(set(layers)) != len(layers):
        raise ValueError(f"{what} {layers[:8]} repeat a layer; each layer may appear once")
    if layers != sorted(layers):
        raise ValueError(f"{what} {layers[:8]} are not in increasing order")
    if n_layers is not None and layers[-1] >= n_layers:
        raise ValueError(f"{what} name layer {layers[-1]}, but the model has layers 0..{n_layers - 1}")


class ModelShape(_Open):
    model_type: StrictStr | None = None
    n_layers: Count
    n_heads: Count
    n_kv_heads: Count | None = None
    head_dim: Count


class SurfaceGrid(_Open):
    """The ``config`` section of a surfaces artifact (:class:`geosteer.manifold.ManifoldConfig`)."""

    grid_size: Annotated[StrictInt, Field(ge=1, le=4096)]
    grid_range: Pair
    layers: Layers | None = None
    ranges: list[Pair] | None = None
    dtype: Literal["float32", "float64", "float16", "bfloat16"] = "float32"
    n_layers: Count | None = None
    n_heads: Count | None = None
    n_kv_heads: Count | None = None
    head_dim: Count | None = None
    model_type: StrictStr | None = None
    base_model: Name | None = None
    extra: dict[str, Any] = {}

    @model_validator(mode="after")
    def _layers(self) -> SurfaceGrid:
        _check_layers(self.layers, self.n_layers, "config.layers")
        return self


Number = Annotated[float, Field(strict=True)]  # a JSON number (ints too); NaN/inf allowed: a result may be


class HeldoutRecord(_Open):
    ppl_before: Number | None = None
    ppl_after: Number | None = None

    @model_validator(mode="after")
    def _after(self) -> HeldoutRecord:
        if self.ppl_before is not None and self.ppl_after is None:  # a run measures "after" whenever "before"
            raise ValueError("meta.training.heldout has ppl_before without ppl_after")
        return self


class TrainingRecord(_Open):
    text: StrictStr | None = None
    tokens: Size | None = None
    steps: Size | None = None
    heldout: HeldoutRecord | None = None


class SurfaceMeta(_Open):
    """The parts of ``meta`` geosteer itself reads (the card, ``geosteer show``); other keys are free."""

    training: TrainingRecord | None = None
    command: StrictStr | None = None


class SurfacesConfig(Header):
    base_model: Name
    model: ModelShape | None = None
    grid_size: Annotated[StrictInt, Field(ge=1, le=4096)] | None = None
    K: Annotated[StrictInt, Field(ge=1, le=4096)] | None = None
    grid_range: Pair | None = None
    layers: Layers | None = None
    lo: list[Finite] | None = None
    hi: list[Finite] | None = None
    shape: list[Size] | None = None
    storage_dtype: Literal["float32", "float16", "bfloat16"] = "float32"
    n_parameters: Size | None = None
    config: SurfaceGrid
    meta: SurfaceMeta = SurfaceMeta()
    history: list[dict[str, Any]] = []
    sha256: Digest
    walls: list[dict[str, Any]] = []

    @model_validator(mode="after")
    def _consistent(self) -> SurfacesConfig:
        n_layers = self.model.n_layers if self.model is not None else self.config.n_layers
        _check_layers(self.layers, n_layers)
        _check_layers(self.config.layers, n_layers, "config.layers")
        if self.config.base_model is not None and self.config.base_model != self.base_model:
            raise ValueError(f"base_model '{self.base_model}' and config.base_model '{self.config.base_model}' "
                             "differ")
        if self.layers is not None and self.config.layers is not None and self.layers != self.config.layers:
            raise ValueError(f"layers {self.layers[:8]} and config.layers {self.config.layers[:8]} differ")
        if self.grid_size is not None and self.grid_size != self.config.grid_size:
            raise ValueError(f"grid_size {self.grid_size} and config.grid_size {self.config.grid_size} differ")
        return self


class GatesConfig(_Open):
    """FFN gates (``format: geosteer-gates``)."""

    base_model: Name
    n_layers: Count
    layers: Layers
    init: Finite = 1.0
    method: StrictStr | None = None
    extra: dict[str, Any] = {}
    sha256: Digest | None = None  # of gates.safetensors (gates written before it was recorded have none)

    @model_validator(mode="after")
    def _layers(self) -> GatesConfig:
        _check_layers(self.layers, self.n_layers)
        return self


class VectorsConfig(Header):
    """Steering vectors (``format: geosteer-vectors``): one vector of ``d_model`` values per layer."""

    base_model: Name
    model_type: StrictStr | None = None
    point: Name
    layers: Layers
    d_model: Count
    n_layers: Count | None = None
    extraction: dict[str, Any] = {}
    settings: dict[str, Any] = {}

    @model_validator(mode="after")
    def _layers(self) -> VectorsConfig:
        _check_layers(self.layers, self.n_layers)
        return self


class ScalesConfig(Header):
    """Learned ∥/⊥ scales (``format: geosteer-directional-scales``)."""

    base_model: Name
    site: Name
    layers: Layers
    n_layers: Count | None = None
    meta: dict[str, Any] = {}

    @model_validator(mode="after")
    def _layers(self) -> ScalesConfig:
        _check_layers(sorted(self.layers), self.n_layers)  # the scales' order is the tensors' order
        return self


class RecipeConfig(Header):
    base_model: Name
    interventions: dict[str, Any]


SCHEMAS: dict[str, type[BaseModel]] = {"geosteer-surfaces": SurfacesConfig, "geosteer-gates": GatesConfig,
                                       "geosteer-recipe": RecipeConfig, "geosteer-vectors": VectorsConfig,
                                       "geosteer-directional-scales": ScalesConfig}


def parse_config_text(text: str, source: str | Path) -> Any:
    """The JSON document in ``text``; too deep or invalid JSON is one :class:`ArtifactError` line."""
    try:
        return parse_json(text, source, max_depth=MAX_DEPTH, what="config")
    except ReadRefused as e:
        raise ArtifactError(str(e).removeprefix("config ")) from None


def read_config_json(path: str | Path) -> Any:
    """Read a config file: at most :data:`MAX_CONFIG_BYTES`, UTF-8, valid JSON, at most :data:`MAX_DEPTH` deep."""
    path = Path(path)
    try:
        text = read_text(path, what="config", limit=MAX_CONFIG_BYTES)
    except ReadRefused as e:
        raise ArtifactError(str(e)) from None
    return parse_config_text(text, path)


def _describe(err: ValidationError) -> str:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    msg = first.get("msg", "invalid").removeprefix("Value error, ")
    if first.get("type") == "value_error":  # a check across fields: its message names them
        return msg
    value = first.get("input")
    shown = "" if first.get("type") == "missing" or isinstance(value, (dict, list)) else f" (got {value!r:.60})"
    return f"{where or 'config'}: {msg}{shown}"


def validate_config(doc: Any, schema: type[BaseModel], source: str | Path) -> BaseModel:
    """``doc`` checked against ``schema``; the first problem is one :class:`ArtifactError` line naming the field."""
    try:
        return schema.model_validate(doc)
    except ValidationError as e:
        raise ArtifactError(f"{source}: invalid {CONFIG_NAME}: {_describe(e)}") from None
    except RecursionError:
        raise ArtifactError(f"{source}: the config is nested too deeply") from None
