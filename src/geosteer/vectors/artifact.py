"""The steering-vectors artifact (``geosteer-vectors``: ``vectors.safetensors``, one float32 tensor per layer
named by its index) and repeng's GGUF control-vector format (:func:`export_gguf`, :func:`import_gguf`:
what llama.cpp's ``--control-vector`` reads).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from geosteer.artifacts import CONFIG_NAME, ArtifactFormat, check_base_model, load_state, push, write_state
from geosteer.errors import ArtifactError, GeosteerError
from geosteer.extras import require
from geosteer.vectors.apply import SteeringVectors
from geosteer.vectors.config import ApplyConfig
from geosteer.vectors.gguf import GGUF_ARCH, export_gguf  # noqa: F401 - export_gguf re-exported

WEIGHTS_NAME = "vectors.safetensors"
_KNOWN = ("base_model", "model_type", "point", "layers", "d_model", "n_layers", "extraction", "settings")


def to_state(sv: SteeringVectors) -> tuple[dict, dict]:
    """The vectors' config (point, layers, width, base model, extraction, apply settings) and one float32
    tensor per layer, named by the layer index."""
    if not isinstance(sv.base_model, str) or not sv.base_model:
        raise ArtifactError("these steering vectors record no base model (e.g. imported from GGUF); set "
                            "base_model= to the model they were made for before saving them")
    width = next(iter(sv.vectors.values())).numel()
    if sv.d_model is not None and sv.d_model != width:
        raise ArtifactError(f"the vectors hold {width} values each but d_model says {sv.d_model}")
    cfg = {"base_model": sv.base_model, "model_type": sv.model_type, "point": sv.point,
           "layers": list(sv.vectors), "d_model": width, "n_layers": sv.n_layers,
           "extraction": sv.extraction, "settings": sv.settings.to_dict()}
    return cfg, {str(layer): v.detach().float() for layer, v in sv.vectors.items()}


def from_state(cfg: dict, tensors: dict, model=None, *, force: bool = False,
               source: str = "vectors") -> SteeringVectors:
    """Steering vectors from a checked config and its tensors: one tensor per recorded layer, named by the
    layer index as written (``3``, never ``03`` or ``-1``), each of ``d_model`` values; with ``model``: the
    recorded base model (unless ``force``), the width and the layers checked against it."""
    names = {str(layer) for layer in cfg["layers"]}
    if set(tensors) != names:
        extra = sorted(set(tensors) - names)[:3]
        missing = sorted(names - set(tensors), key=int)[:3]
        raise ArtifactError(f"{source}: {WEIGHTS_NAME} must hold one tensor per layer of the config, named by "
                            f"its index ({', '.join(sorted(names, key=int)[:8])}); "
                            + (f"unexpected {', '.join(extra)}" if extra else f"missing {', '.join(missing)}"))
    width = cfg["d_model"]
    for name, t in tensors.items():
        if not t.is_floating_point() or t.dim() != 1 or t.numel() != width:
            raise ArtifactError(f"{source}: the vector of layer {name} has shape {tuple(t.shape)} ({t.dtype}); "
                                f"the config says d_model {width} (one float vector of {width} values per layer)")
    try:
        settings = ApplyConfig(**(cfg.get("settings") or {}))
    except (TypeError, GeosteerError) as e:
        raise ArtifactError(f"{source}: bad apply settings ({e})") from None
    try:
        sv = SteeringVectors({int(k): t.float() for k, t in tensors.items()}, point=cfg["point"],
                             base_model=cfg["base_model"], model_type=cfg.get("model_type") or "",
                             d_model=width, n_layers=cfg.get("n_layers"), extraction=cfg.get("extraction") or {},
                             settings=settings)
    except GeosteerError as e:
        raise ArtifactError(f"{source}: {e}") from None
    if model is not None:
        from geosteer.models.loading import model_id
        from geosteer.overflow import check_forward_finite

        check_base_model(sv.base_model, model_id(model), what=f"steering vectors at {source}", force=force)
        sv._check_model(model)
        check_forward_finite(model, sv, f"steering vectors {source}")  # finite but huge vectors overflow
    return sv


def _card(sv: SteeringVectors, command: str | None) -> str:
    ex = sv.extraction
    method = ex.get("method", "given")
    data = (f"{ex.get('n_positive')} [positive, negative] prompt pairs" if ex.get("paired")
            else f"{ex.get('n_positive')} positive and {ex.get('n_negative')} negative prompts") if ex else "n/a"
    norms = sv.norms()
    return VECTORS.card(
        base_model=str(sv.base_model), title=f"Steering vectors for {sv.base_model}",
        summary=f"One steering vector per layer ({method}) at `{sv.point}`. Apply with "
                "`geosteer.vectors.load_vectors(folder, model)` or the recipe key `vectors=FOLDER`.",
        training={"data": data, "positions": ex.get("positions"), "method": method},
        n_parameters=sum(v.numel() for v in sv.vectors.values()), command=command,
        files=[CONFIG_NAME, WEIGHTS_NAME],
        extra={"hook point": sv.point, "layers": ", ".join(map(str, sv.vectors)),
               "vector norm (min)": min(norms.values()), "vector norm (max)": max(norms.values())},
        tags=["steering-vectors"])


def save_vectors(sv: SteeringVectors, folder: str | Path, *, overwrite: bool = True,
                 command: str | None = None) -> Path:
    """Write the artifact folder atomically (config, ``vectors.safetensors``, model card)."""
    return write_state(VECTORS, sv, folder, overwrite=overwrite, card=_card(sv, command))


def load_vectors(folder: str | Path, model=None, *, force: bool = False) -> SteeringVectors:
    """Read a vectors artifact (a folder or a Hub id), checked; with ``model``, check that it was made for it
    (``force``: use vectors recorded for another base model anyway)."""
    return load_state(VECTORS, folder, model, force=force)


def push_vectors(sv: SteeringVectors, repo_id: str, *, folder: str | Path | None = None, private: bool = True,
                 token: str | None = None) -> str:
    """Save (into ``folder``, or a temporary one) and upload to the Hub repo ``repo_id``; return its URL."""
    if folder is not None:
        return push(save_vectors(sv, folder), repo_id, private=private, token=token)
    with tempfile.TemporaryDirectory() as tmp:
        return push(save_vectors(sv, Path(tmp) / "vectors"), repo_id, private=private, token=token)


def import_gguf(path: str | Path, model=None, *, force: bool = False) -> SteeringVectors:
    """Read a GGUF control-vector file (repeng's format) as resid_post steering vectors. With ``model``:
    a ``model_hint`` naming another architecture than the model's is refused (``force``: use them anyway),
    and the width and layers are checked."""

    gguf = require("gguf")
    try:
        reader = gguf.GGUFReader(str(path))
    except (OSError, ValueError) as e:
        raise ArtifactError(f"{path} is not a readable GGUF file ({e})") from None
    arch = reader.get_field("general.architecture")
    if arch is None or bytes(arch.parts[-1]).decode("utf-8", "replace") != GGUF_ARCH:
        raise ArtifactError(f"{path} is not a GGUF control-vector file (architecture is not '{GGUF_ARCH}')")
    field = reader.get_field(f"{GGUF_ARCH}.model_hint")
    hint = bytes(field.parts[-1]).decode("utf-8", "replace") if field else ""
    vectors = {}
    for t in reader.tensors:
        if t.name.startswith("direction."):
            index = t.name.split(".", 1)[1]
            if not index.isdigit() or str(int(index)) != index or int(index) in vectors:
                raise ArtifactError(f"{path}: tensor {t.name} does not name a layer (direction.<index>, once each)")
            vectors[int(index)] = torch.tensor(t.data.copy()).float().reshape(-1)
    if not vectors:
        raise ArtifactError(f"{path} holds no direction.<layer> tensors")
    try:
        sv = SteeringVectors(vectors, point="resid_post", model_type=hint,
                             d_model=next(iter(vectors.values())).numel(), extraction={"gguf_model_hint": hint})
    except GeosteerError as e:
        raise ArtifactError(f"{path}: {e}") from None
    if model is not None:
        got = str(getattr(getattr(model, "config", None), "model_type", "") or "")
        if hint and got and hint != got and not force:
            raise ArtifactError(f"{path} is a control vector for a '{hint}' model (its model_hint), not for this "
                                f"'{got}' model; pass force=True (CLI: --force) to use it anyway")
        sv.model_type = got or hint
        sv._check_model(model)
    return sv


def describe_vectors(ref: str | Path) -> dict:
    """What a steering-vectors artifact holds (``geosteer show``): point, extraction, apply settings, a norm
    per layer. Reads only."""
    sv = load_vectors(ref)
    return {"base_model": sv.base_model, "point": sv.point, "d_model": sv.d_model, "extraction": sv.extraction,
            "settings": sv.settings.to_dict(),
            "layers": [{"layer": layer, "norm": norm} for layer, norm in sv.norms().items()]}


VECTORS = ArtifactFormat("geosteer-vectors", 1, tensors=(WEIGHTS_NAME,), known_keys=_KNOWN, method="vectors",
                         saves=SteeringVectors, to_state=to_state, from_state=from_state,
                         save=lambda sv, folder, **kw: save_vectors(sv, folder, **kw), describe=describe_vectors,
                         exports={".gguf": lambda ref, path: load_vectors(ref).export_gguf(path)})
