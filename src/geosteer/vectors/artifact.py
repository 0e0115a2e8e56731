"""The steering-vectors artifact and repeng's GGUF control-vector format.

A folder: ``geosteer_config.json`` (format ``geosteer-vectors``: hook point, layers, base model, how the
vectors were extracted and the default apply settings), ``vectors.safetensors`` (one float32 tensor per
layer, named by the layer index: ``"3"``, ``"5"``) and a model card. :func:`load_vectors` reads it (also
through :func:`geosteer.artifacts.load_artifact` and ``org/name[@rev]`` Hub ids).

:func:`export_gguf` writes repeng's control-vector file (``general.architecture = controlvector``,
``controlvector.model_hint``, ``controlvector.layer_count``, one ``direction.<layer>`` tensor per layer),
the format llama.cpp's ``--control-vector`` reads; :func:`import_gguf` reads one back.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch

from geosteer.artifacts import (
    CARD_NAME,
    CONFIG_NAME,
    check_base_model,
    locate,
    push,
    write_folder_atomic,
)
from geosteer.errors import ArtifactError, GeosteerError
from geosteer.methods import ArtifactFormat
from geosteer.vectors.apply import SteeringVectors
from geosteer.vectors.config import ApplyConfig
from geosteer.vectors.gguf import GGUF_ARCH, export_gguf  # noqa: F401 - export_gguf re-exported

WEIGHTS_NAME = "vectors.safetensors"
_KNOWN = ("base_model", "model_type", "point", "layers", "d_model", "n_layers", "extraction", "settings")


def _config(sv: SteeringVectors) -> dict:
    return {**VECTORS.header(), "base_model": sv.base_model, "model_type": sv.model_type, "point": sv.point,
            "layers": list(sv.vectors), "d_model": sv.d_model, "n_layers": sv.n_layers,
            "extraction": sv.extraction, "settings": sv.settings.to_dict()}


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
    from safetensors.torch import save_file

    tensors = {str(layer): v.detach().float().cpu().contiguous() for layer, v in sv.vectors.items()}

    def fill(tmp: Path) -> None:
        (tmp / CONFIG_NAME).write_text(json.dumps(_config(sv), indent=2) + "\n", encoding="utf-8")
        save_file(tensors, str(tmp / WEIGHTS_NAME), metadata={"format": VECTORS.name, "point": sv.point})
        (tmp / CARD_NAME).write_text(_card(sv, command), encoding="utf-8")

    return write_folder_atomic(folder, fill, overwrite=overwrite, kind="geosteer-vectors")


def load_vectors(folder: str | Path, model=None, *, force: bool = False) -> SteeringVectors:
    """Read a vectors artifact (a folder or a Hub id); with ``model``, check that it was made for it."""
    from safetensors.torch import load_file

    path = locate(folder)
    if not (path / WEIGHTS_NAME).is_file():
        raise ArtifactError(f"{path} is not a steering-vectors artifact (needs {CONFIG_NAME} and {WEIGHTS_NAME})")
    cfg = VECTORS.read(path)
    raw = load_file(str(path / WEIGHTS_NAME))
    try:
        vectors = {int(name): t for name, t in raw.items()}
    except ValueError:
        raise ArtifactError(f"{path / WEIGHTS_NAME}: tensors must be named by layer index, got "
                            f"{', '.join(sorted(raw))}") from None
    try:
        settings = ApplyConfig(**(cfg.get("settings") or {}))
    except (TypeError, GeosteerError) as e:
        raise ArtifactError(f"{path}: bad apply settings in {CONFIG_NAME} ({e})") from None
    sv = SteeringVectors(vectors, point=cfg.get("point", "resid_post"), base_model=cfg.get("base_model"),
                         model_type=cfg.get("model_type") or "", d_model=cfg.get("d_model"),
                         n_layers=cfg.get("n_layers"), extraction=cfg.get("extraction") or {}, settings=settings)
    if model is not None:
        from geosteer.models.loading import model_id
        from geosteer.overflow import check_forward_finite

        check_base_model(sv.base_model, model_id(model), what=f"steering vectors at {path}", force=force)
        sv._check_model(model)
        check_forward_finite(model, sv, f"steering vectors {path}")  # finite but huge vectors overflow
    return sv


def push_vectors(sv: SteeringVectors, repo_id: str, *, folder: str | Path | None = None, private: bool = True,
                 token: str | None = None) -> str:
    """Save (into ``folder``, or a temporary one) and upload to the Hub repo ``repo_id``; return its URL."""
    if folder is not None:
        return push(save_vectors(sv, folder), repo_id, private=private, token=token)
    with tempfile.TemporaryDirectory() as tmp:
        return push(save_vectors(sv, Path(tmp) / "vectors"), repo_id, private=private, token=token)


def import_gguf(path: str | Path) -> SteeringVectors:
    """Read a GGUF control-vector file (repeng's format) as resid_post steering vectors."""
    from geosteer.extras import require

    gguf = require("gguf")
    try:
        reader = gguf.GGUFReader(str(path))
    except (OSError, ValueError) as e:
        raise ArtifactError(f"{path} is not a readable GGUF file ({e})") from None
    arch = reader.get_field("general.architecture")
    if arch is None or bytes(arch.parts[-1]).decode("utf-8", "replace") != GGUF_ARCH:
        raise ArtifactError(f"{path} is not a GGUF control-vector file (architecture is not '{GGUF_ARCH}')")
    hint = reader.get_field(f"{GGUF_ARCH}.model_hint")
    vectors = {}
    for t in reader.tensors:
        if t.name.startswith("direction."):
            vectors[int(t.name.split(".", 1)[1])] = torch.tensor(t.data.copy()).float().reshape(-1)
    if not vectors:
        raise ArtifactError(f"{path} holds no direction.<layer> tensors")
    return SteeringVectors(vectors, point="resid_post", model_type=bytes(hint.parts[-1]).decode() if hint else "",
                           d_model=next(iter(vectors.values())).numel())


VECTORS = ArtifactFormat("geosteer-vectors", 1, tensors=(WEIGHTS_NAME,), known_keys=_KNOWN,
                         load=lambda folder, model: load_vectors(folder, model), method="vectors",
                         saves=SteeringVectors, save=lambda sv, folder, **kw: save_vectors(sv, folder, **kw))
