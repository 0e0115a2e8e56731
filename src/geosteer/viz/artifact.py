"""Read a surface artifact folder for plotting, without a model (figures never rerun the model).

``ArtifactSurfaces`` exposes the read-only part of the ``SurfaceBank`` interface the figures use:
``coefficients`` (layers, heads, head_dim, K, K), ``layers``, per-layer ``lo``/``hi``, ``grid_size`` and
``surface(layer, head, dim, q, k)`` = b(q)ᵀ C b(k) (paper Eq. 1).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from geosteer.errors import ArtifactError

CONFIG = "geosteer_config.json"


@dataclass
class ArtifactSurfaces:
    coefficients: torch.Tensor
    layers: list[int]
    lo: torch.Tensor
    hi: torch.Tensor
    grid_size: int
    config: dict
    path: Path | None = None

    @classmethod
    def read(cls, folder: str | Path) -> ArtifactSurfaces:
        from safetensors.torch import load_file

        folder = Path(folder)
        cfg_path = folder / CONFIG
        if not cfg_path.is_file():
            raise ArtifactError(f"{folder} is not a surface artifact (no {CONFIG})")
        cfg = json.loads(cfg_path.read_text())
        files = sorted(folder.glob("*.safetensors"))
        if not files:
            raise ArtifactError(f"{folder}: no .safetensors file")
        tensors: dict[str, torch.Tensor] = {}
        for f in files:
            tensors.update(load_file(str(f)))
        coef = _find(tensors, ("coefficients",), ndim=5, folder=folder)
        n = coef.shape[0]
        layers = [int(x) for x in (cfg.get("layers") or range(n))]
        if len(layers) != n:
            raise ArtifactError(f"{folder}: config lists {len(layers)} layers, coefficients have {n}")
        lo = _per_layer(tensors.get("lo", cfg.get("lo")), n, "lo", folder)
        hi = _per_layer(tensors.get("hi", cfg.get("hi")), n, "hi", folder)
        grid = int(cfg.get("grid_size", coef.shape[-1] - 3))
        return cls(coef.float(), layers, lo, hi, grid, cfg, folder)

    @torch.no_grad()
    def surface(self, layer: int, head: int, dim: int, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        from geosteer.manifold.bspline import bspline_basis

        slot = self.layers.index(layer)
        lo, hi = float(self.lo[slot]), float(self.hi[slot])
        c = self.coefficients[slot, head, dim]
        bq = bspline_basis(q.float(), self.grid_size, lo, hi)
        bk = bspline_basis(k.float(), self.grid_size, lo, hi)
        return ((bq @ c) * bk).sum(-1)


def _find(tensors: dict, names: tuple[str, ...], ndim: int, folder: Path) -> torch.Tensor:
    for name in names:
        for key, t in tensors.items():
            if key == name or key.endswith("." + name):
                return t
    cands = [t for t in tensors.values() if t.dim() == ndim]
    if len(cands) == 1:
        return cands[0]
    raise ArtifactError(f"{folder}: no '{names[0]}' tensor ({ndim}-D) among {sorted(tensors)}")


def _per_layer(v, n: int, name: str, folder: Path) -> torch.Tensor:
    if v is None:
        raise ArtifactError(f"{folder}: no '{name}' range in the tensors or the config")
    t = torch.as_tensor(v, dtype=torch.float32).reshape(-1)
    if t.numel() == 1:
        t = t.expand(n).clone()
    if t.numel() != n:
        raise ArtifactError(f"{folder}: '{name}' has {t.numel()} values for {n} layers")
    return t
