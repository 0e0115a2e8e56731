"""The LoReFT artifact (format ``geosteer-loreft``): ``loreft.safetensors`` holds ``R``, ``W`` (layers × rank ×
d_model) and ``b`` (layers × rank), float32, in the order of the config's ``layers``; the config records the
base model, the hook point, the width and the training record. The recipe key ``loreft=FOLDER`` applies it
(``loreft_strength``: s).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import model_validator

from geosteer.artifacts import CONFIG_NAME, ArtifactFormat, check_base_model, load_state, write_state
from geosteer.config_schema import Count, Header, Layers, Name
from geosteer.errors import ArtifactError, GeosteerError
from geosteer.loreft.intervention import POINT, LoReFT
from geosteer.models.loading import model_id

WEIGHTS_NAME = "loreft.safetensors"
ORTHONORMAL_TOL = 1e-3  # |R Rᵀ − I| above this: R is not orthonormal (LoReFT's premise)
_KNOWN = ("base_model", "point", "layers", "rank", "d_model", "n_layers", "meta")


class LoReFTConfig(Header):
    """The config of a ``geosteer-loreft`` artifact (checked on every read, before :func:`from_state`)."""

    base_model: Name
    point: Literal["resid_post"] = POINT
    layers: Layers
    rank: Count
    d_model: Count
    n_layers: Count | None = None
    meta: dict[str, Any] = {}

    @model_validator(mode="after")
    def _check(self) -> LoReFTConfig:
        if len(set(self.layers)) != len(self.layers):
            raise ValueError(f"layers {self.layers[:8]} repeat a layer")
        if self.rank > self.d_model:
            raise ValueError(f"rank {self.rank} exceeds d_model {self.d_model}")
        if self.n_layers is not None and max(self.layers) >= self.n_layers:
            raise ValueError(f"layers name layer {max(self.layers)}, but the model has layers 0..{self.n_layers - 1}")
        return self


def to_state(lo: LoReFT) -> tuple[dict, dict]:
    """Base model, point, layers, rank, width, training record; the tensors ``R``, ``W``, ``b``."""
    if not isinstance(lo.base_model, str) or not lo.base_model:
        raise ArtifactError("this LoReFT records no base model; set base_model= to the model it was made for")
    cfg = {"base_model": lo.base_model, "point": POINT, "layers": list(lo.layers), "rank": lo.rank,
           "d_model": lo.d_model, "n_layers": getattr(lo, "n_layers", None), "meta": dict(lo.meta)}
    return cfg, {"R": lo.R.detach().float().contiguous(), "W": lo.W.detach().float().contiguous(),
                 "b": lo.b.detach().float().contiguous()}


def _check_tensors(cfg: dict, tensors: dict, source: str) -> None:
    n, r, d = len(cfg["layers"]), cfg["rank"], cfg["d_model"]
    want = {"R": (n, r, d), "W": (n, r, d), "b": (n, r)}
    got = {k: tuple(t.shape) for k, t in tensors.items()}
    if got != want or not all(t.is_floating_point() for t in tensors.values()):
        raise ArtifactError(f"{source}: {WEIGHTS_NAME} must hold float tensors R {want['R']}, W {want['W']} and "
                            f"b {want['b']}; got " + ", ".join(f"{k} {v}" for k, v in sorted(got.items())))
    R = tensors["R"].double()
    off = (R @ R.transpose(1, 2) - torch.eye(r, dtype=torch.float64)).abs().amax() if bool(
        torch.isfinite(R).all()) else float("inf")
    if not float(off) <= ORTHONORMAL_TOL:
        raise ArtifactError(f"{source}: the rows of R are not orthonormal (|R Rᵀ − I| = {float(off):.3g}); "
                            "LoReFT needs an orthonormal R")


def from_state(cfg: dict, tensors: dict, model=None, *, force: bool = False, source: str = "loreft") -> LoReFT:
    """The LoReFT of a checked config and its tensors; with ``model``: base model (unless ``force``), width and
    layers checked against it."""
    _check_tensors(cfg, tensors, source)
    try:
        lo = LoReFT(cfg["layers"], tensors["R"], tensors["W"], tensors["b"], base_model=cfg["base_model"],
                    meta=cfg.get("meta") or {})
    except GeosteerError as e:
        raise ArtifactError(f"{source}: {e}") from None
    lo.n_layers = cfg.get("n_layers")
    if model is not None:
        check_base_model(lo.base_model, model_id(model), what=f"LoReFT at {source}", force=force)
        lo.check_model(model)
    return lo


def _card(lo: LoReFT, command: str | None) -> str:
    te = lo.meta.get("train_eval") or {}
    extra = {"hook point": POINT, "layers": ", ".join(map(str, lo.layers)), "rank": lo.rank}
    extra.update({f"training prompts: {k}": round(float(v), 4) for k, v in te.items()})
    return LOREFT.card(
        base_model=str(lo.base_model), title=f"LoReFT for {lo.base_model}",
        summary="Low-rank representation fine-tuning: h ← h + s·Rᵀ(W h + b − R h) at every position after the "
                "listed layers. Apply with the recipe key `loreft=FOLDER` (`loreft_strength=s`, 0 is the stock "
                "model) or `geosteer.load(FOLDER, model=model)`.",
        n_parameters=lo.n_parameters(), command=command, files=[CONFIG_NAME, WEIGHTS_NAME], extra=extra,
        tags=["steering", "loreft"])


def save_loreft(lo: LoReFT, folder: str | Path, *, overwrite: bool = True, command: str | None = None) -> Path:
    """Write the artifact folder atomically (config, ``loreft.safetensors``, model card)."""
    if command:
        lo.meta = {**lo.meta, "command": command}
    return write_state(LOREFT, lo, folder, overwrite=overwrite, card=_card(lo, command))


def load_loreft(folder: str | Path, model=None, *, force: bool = False) -> LoReFT:
    """Read a LoReFT artifact (a folder or a Hub id), checked; with ``model``, check that it was made for it."""
    return load_state(LOREFT, folder, model, force=force)


def describe_loreft(ref: str | Path) -> dict:
    """What a LoReFT artifact holds (``geosteer show``): layers, rank, the norms of W − R and b per layer."""
    lo = load_loreft(ref)
    rows = [{"layer": layer, "edit_norm": float((lo.W[i] - lo.R[i]).norm()), "bias_norm": float(lo.b[i].norm())}
            for i, layer in enumerate(lo.layers)]
    return {"base_model": lo.base_model, "point": POINT, "rank": lo.rank, "d_model": lo.d_model,
            "meta": lo.meta, "layers": rows}


LOREFT = ArtifactFormat("geosteer-loreft", 1, tensors=(WEIGHTS_NAME,), known_keys=_KNOWN, method="loreft",
                        saves=LoReFT, to_state=to_state, from_state=from_state, schema=LoReFTConfig,
                        save=lambda lo, folder, **kw: save_loreft(lo, folder, **kw), describe=describe_loreft)
