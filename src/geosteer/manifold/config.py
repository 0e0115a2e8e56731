"""``ManifoldConfig``: everything that defines a bank of attention surfaces besides its coefficients."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from geosteer.kernels.bspline import check_grid, n_basis
from geosteer.models.anatomy import anatomy
from geosteer.models.loading import model_id


@dataclass
class ManifoldConfig:
    """Shape and grid of a :class:`~geosteer.manifold.SurfaceBank`.

    ``grid_range`` is the default [lo, hi] for every layer; ``ranges`` (one (lo, hi) per entry of
    ``layers``) overrides it per layer (e.g. from ``--calibrate``). ``layers`` None means all layers.
    The model-shape fields are filled by :meth:`for_model` and recorded in artifacts.
    """

    grid_size: int = 8
    grid_range: tuple[float, float] = (-4.0, 4.0)
    layers: list[int] | None = None
    ranges: list[tuple[float, float]] | None = None
    dtype: str = "float32"  # parameter dtype in memory (artifacts may store float16)
    # model shape (filled by for_model)
    n_layers: int | None = None
    n_heads: int | None = None
    n_kv_heads: int | None = None
    head_dim: int | None = None
    model_type: str | None = None
    base_model: str | None = None
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.grid_range = (float(self.grid_range[0]), float(self.grid_range[1]))
        check_grid(self.grid_size, self.grid_range[0], self.grid_range[1])
        self.grid_size = int(self.grid_size)
        if self.layers is not None:
            self.layers = [int(x) for x in self.layers]
            if len(set(self.layers)) != len(self.layers):
                raise ValueError(f"duplicate layers in {self.layers}")
        if self.ranges is not None:
            self.ranges = [(float(a), float(b)) for a, b in self.ranges]
            for a, b in self.ranges:
                check_grid(self.grid_size, a, b)
            if self.layers is not None and len(self.ranges) != len(self.layers):
                raise ValueError(f"{len(self.ranges)} ranges given for {len(self.layers)} layers")
        if self.dtype not in ("float32", "float64", "float16", "bfloat16"):
            raise ValueError(f"dtype must be float32, float64, float16 or bfloat16 (got {self.dtype})")

    @property
    def K(self) -> int:
        return n_basis(self.grid_size)

    @classmethod
    def for_model(cls, model, grid_size: int = 8, grid_range=(-4.0, 4.0), layers=None, ranges=None,
                  dtype: str = "float32") -> ManifoldConfig:

        an = anatomy(model)
        layers = an.check_layers(layers)
        return cls(grid_size=grid_size, grid_range=tuple(grid_range), layers=layers, ranges=ranges,
                   dtype=dtype, n_layers=an.n_layers, n_heads=an.n_heads, n_kv_heads=an.n_kv_heads,
                   head_dim=an.head_dim, model_type=an.model_type, base_model=model_id(model))

    def resolved_layers(self) -> list[int]:
        if self.layers is not None:
            return list(self.layers)
        if self.n_layers is None:
            raise ValueError("ManifoldConfig needs layers or n_layers")
        return list(range(self.n_layers))

    def resolved_ranges(self) -> list[tuple[float, float]]:
        layers = self.resolved_layers()
        if self.ranges is not None:
            if len(self.ranges) != len(layers):
                raise ValueError(f"{len(self.ranges)} ranges given for {len(layers)} layers")
            return list(self.ranges)
        return [tuple(self.grid_range)] * len(layers)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["grid_range"] = list(self.grid_range)
        d["ranges"] = [list(r) for r in self.ranges] if self.ranges is not None else None
        return d

    @classmethod
    def from_dict(cls, d: dict) -> ManifoldConfig:
        known = {f for f in cls.__dataclass_fields__}
        kw = {k: v for k, v in d.items() if k in known}
        if kw.get("grid_range") is not None:
            kw["grid_range"] = tuple(kw["grid_range"])
        if kw.get("ranges") is not None:
            kw["ranges"] = [tuple(r) for r in kw["ranges"]]
        return cls(**kw)
