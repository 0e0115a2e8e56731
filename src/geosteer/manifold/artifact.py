"""Surface artifacts: ``surfaces.safetensors`` (coefficients, lo, hi) and ``geosteer_config.json`` (format,
base model, shapes, grid, training, edit history, SHA-256 of the tensors), saved atomically and checked on load.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from geosteer.artifacts import (
    CONFIG_NAME,
    ArtifactFormat,
    check_base_model,
    check_config,
    check_not_interrupted,
    check_output_folder,
    load_state,
    locate,
    write_state,
)
from geosteer.config_schema import read_config_json
from geosteer.errors import ArtifactError, GeosteerError
from geosteer.manifold.bank import SurfaceBank
from geosteer.manifold.config import ManifoldConfig
from geosteer.manifold.surface_checks import check_surfaces, layers_device
from geosteer.models.anatomy import anatomy
from geosteer.models.loading import model_id
from geosteer.overflow import check_forward_finite

FORMAT = "geosteer-surfaces"
VERSION = 2  # 2: exact region walls ("walls"); written only when the bank has walls, else 1
TENSORS_NAME = "surfaces.safetensors"
_KNOWN = {"base_model", "model", "grid_size", "K", "grid_range", "layers", "lo", "hi", "shape", "storage_dtype",
          "n_parameters", "config", "meta", "history", "sha256", "walls"}
_STORE = {"float16": torch.float16, "float32": torch.float32, "bfloat16": torch.bfloat16}


def _commit() -> str | None:
    try:
        import subprocess

        here = Path(__file__).resolve().parent
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=5)
        return out.stdout.strip() or None
    except Exception:  # noqa: BLE001 - best effort
        return None


def to_state(bank: SurfaceBank) -> tuple[dict, dict]:
    """The surfaces' config (shapes, grid, ranges, walls, meta, history; version 2 only with walls) and the
    tensors ``coefficients`` (in ``bank.storage_dtype``, float32 unless a save asks for less), ``lo``, ``hi``."""
    dtype = getattr(bank, "storage_dtype", "float32")
    check_surfaces(bank.coefficients, bank.lo, bank.hi, bank.layers, source="cannot save the surfaces")
    coef = bank.coefficients.detach().to("cpu", _STORE[dtype])
    if dtype != "float32":
        check_surfaces(coef, bank.lo, bank.hi, bank.layers,
                       source=f"cannot save the surfaces as {dtype} (a value is out of its range)")
    cfg = bank.config
    walls = [w.to_dict() for w in getattr(bank, "walls", [])]
    doc = {
        "version": VERSION if walls else 1,  # readers of version 1 keep reading wall-less artifacts
        "commit": _commit(),
        "base_model": cfg.base_model,
        "model": {"model_type": cfg.model_type, "n_layers": cfg.n_layers, "n_heads": cfg.n_heads,
                  "n_kv_heads": cfg.n_kv_heads, "head_dim": cfg.head_dim},
        "grid_size": cfg.grid_size, "K": cfg.K, "grid_range": list(cfg.grid_range), "layers": list(bank.layers),
        "lo": [float(x) for x in bank.lo], "hi": [float(x) for x in bank.hi], "shape": list(coef.shape),
        "storage_dtype": dtype, "n_parameters": bank.n_parameters(), "config": cfg.to_dict(),
        "meta": _jsonable(bank.meta), "history": _jsonable(bank.history),
    }
    if walls:
        doc["walls"] = walls
    return doc, {"coefficients": coef, "lo": bank.lo.detach().float(), "hi": bank.hi.detach().float()}


def save(bank: SurfaceBank, path: str | Path, *, dtype: str = "float32", **meta) -> Path:
    """Write ``bank`` to the folder ``path`` atomically; ``meta`` goes into the config (e.g. training=...).

    ``dtype``: storage dtype of the coefficients (``float16`` halves the size; loading gives float32).
    Returns the folder.
    """
    if dtype not in _STORE:
        raise ValueError(f"storage dtype must be one of {', '.join(_STORE)} (got {dtype})")
    folder = Path(path)
    if folder.suffix != ".safetensors" and folder.name != CONFIG_NAME:
        check_output_folder(folder, FORMAT, what="output folder")  # before any check: never over the user's files
    bank.meta.update(meta)
    bank.storage_dtype = dtype
    try:
        config, _ = to_state(bank)
        return write_state(SURFACES, bank, folder, card=_model_card(config, bank))
    except GeosteerError as e:
        if str(e).startswith("cannot save the surfaces"):
            raise type(e)(str(e).replace("cannot save the surfaces", f"cannot save {folder}", 1)) from None
        raise
    finally:
        bank.storage_dtype = "float32"


def _model_card(doc: dict, bank: SurfaceBank) -> str | None:
    """README.md with Hub metadata (geosteer.artifacts conventions); best effort (None: the generic card)."""
    try:
        from geosteer.artifacts import render_model_card

        meta = bank.meta or {}
        tr = meta.get("training") or {}
        held = tr.get("heldout") or {}
        training = {k: tr[k] for k in ("tokens", "steps") if tr.get(k) is not None}
        if tr.get("text"):
            training["data"] = f"bundled corpus, {tr['text']} split" if tr["text"] == "train" else tr["text"]
        edits = [str(h.get("edit")) + (f" ({h['time']})" if h.get("time") else "") for h in bank.history]
        extra = {"grid": f"{doc['grid_size']} (K = {doc['K']})", "layers": len(bank.layers),
                 "storage dtype": doc["storage_dtype"]}
        ppl = {"ppl_before": held.get("ppl_before"), "ppl_after": held.get("ppl_after")}
        if held.get("ppl_before") is not None or held.get("ppl_after") is not None:
            extra["perplexity measured on"] = _measured_on(held)
        if edits:
            # the training run's numbers do not describe the edited surfaces: say so, do not show them as "after"
            ppl = {"ppl_before": None, "ppl_after": None}
            extra["held-out perplexity at training, before the edits"] = (
                f"{_num(held.get('ppl_before'))} → {_num(held.get('ppl_after'))} (not re-measured after the edits)")
            extra["edits (after training)"] = "; ".join(edits)
        return render_model_card(
                method="manifold.surfaces", base_model=str(doc.get("base_model")),
                title=f"Attention-manifold surfaces for {doc.get('base_model')}",
                summary="Learned B-spline value-modulation surfaces (geosteer attention manifolds). Load with "
                        "`geosteer.manifold.load(folder, model=model)`.",
                training=training, **ppl,
                command=meta.get("command"), n_parameters=bank.n_parameters(),
                files=[CONFIG_NAME, TENSORS_NAME], extra=extra, tags=["attention-manifolds"])
    except Exception:  # noqa: BLE001 - the card is documentation only
        return None


def _num(x) -> str:
    return f"{x:.4f}" if isinstance(x, (int, float)) else "n/a"


def _measured_on(held: dict) -> str:
    """What the card's perplexities measured: split, tokens, window (as recorded at training)."""
    parts = [f"bundled corpus, {held['split']} split" if held.get("split") else "held-out text"]
    if held.get("max_tokens"):
        parts.append(f"first {held['max_tokens']:,} tokens")
    if held.get("context"):
        parts.append(f"context {held['context']} / stride {held.get('stride')}")
    return ", ".join(parts) + ", when the surfaces were trained"


def _jsonable(obj):
    return json.loads(json.dumps(obj, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o)))


def resolve(path: str | Path) -> Path:
    """The artifact folder for ``path`` (the folder itself, or one of its two files, or a Hub repo id
    ``org/name[@revision]``: its snapshot in the huggingface_hub cache, see ``geosteer.artifacts.locate``)."""

    p = locate(path)
    if p.is_file() and p.name in (CONFIG_NAME, TENSORS_NAME):
        p = p.parent
    check_not_interrupted(p)  # a reader never repairs (renames, deletes): it refuses
    if not p.exists():
        raise ArtifactError(f"no surfaces artifact at {p} (no such file or folder)")
    if not p.is_dir():
        raise ArtifactError(f"{p} is not a surfaces artifact (expected a folder with {CONFIG_NAME} and "
                            f"{TENSORS_NAME})")
    if not (p / CONFIG_NAME).is_file():
        raise ArtifactError(f"{p} is not a surfaces artifact (missing {CONFIG_NAME})")
    if not (p / TENSORS_NAME).is_file():
        raise ArtifactError(f"{p} is not a complete surfaces artifact (missing {TENSORS_NAME})")
    return p


def read_config(path: str | Path) -> dict:
    """The checked config of a surfaces artifact (format, version ≤ this reader's; unknown keys warned)."""

    folder = resolve(path)
    doc = read_config_json(folder / CONFIG_NAME)
    check_config(doc, fmt=FORMAT, reader_version=VERSION, known_keys=_KNOWN, source=folder)
    return doc


def from_state(doc: dict, tensors: dict, model=None, *, force: bool = False, source: str = "surfaces") -> SurfaceBank:
    """A :class:`SurfaceBank` (float32) from a checked config and its tensors; with ``model``: shapes and the
    recorded base model (unless ``force``) checked, moved to the model's device, a probe forward finite."""
    for name in ("coefficients", "lo", "hi"):
        if name not in tensors:
            raise ArtifactError(f"{source}/{TENSORS_NAME} lacks the '{name}' tensor (has {sorted(tensors)})")
    coef = tensors["coefficients"]
    try:
        cfg = ManifoldConfig.from_dict(doc["config"])
        cfg.base_model = doc["base_model"]  # the one the schema requires (config.base_model, if any, agrees)
        layers = list(doc["layers"]) if doc.get("layers") is not None else cfg.resolved_layers()
    except (TypeError, ValueError) as e:
        raise ArtifactError(f"{source}/{CONFIG_NAME}: invalid surfaces config ({e})") from None
    K = cfg.K
    expect = (len(layers), cfg.n_heads, cfg.head_dim, K, K)
    if tuple(coef.shape) != expect:
        raise ArtifactError(f"{source}/{TENSORS_NAME}: coefficients have shape {tuple(coef.shape)} but the config "
                            f"says {expect} (layers, heads, head_dim, K, K)")
    lo, hi = tensors["lo"].float(), tensors["hi"].float()
    if lo.shape != (len(layers),) or hi.shape != (len(layers),):
        raise ArtifactError(f"{source}/{TENSORS_NAME}: lo/hi have shapes {tuple(lo.shape)}/{tuple(hi.shape)}, "
                            f"expected ({len(layers)},)")
    check_surfaces(coef.float(), lo, hi, layers, source=source)
    cfg.layers = layers
    cfg.ranges = [(float(a), float(b)) for a, b in zip(lo.tolist(), hi.tolist(), strict=True)]
    cfg.dtype = "float32"
    bank = SurfaceBank(cfg)
    with torch.no_grad():
        bank.coefficients.copy_(coef.float())
        bank.lo.copy_(lo)
        bank.hi.copy_(hi)
    walls = doc.get("walls") or []
    if not isinstance(walls, list):
        raise ArtifactError(f"{source}/{CONFIG_NAME}: walls must be a list (got {type(walls).__name__})")
    try:
        bank.set_walls(walls)
    except GeosteerError as e:
        raise ArtifactError(f"{source}/{CONFIG_NAME}: invalid wall ({e})") from None
    bank.history = list(doc.get("history") or [])
    bank.meta = dict(doc.get("meta") or {})
    bank.source = source
    if model is not None:
        _check_on(bank, model, force=force, source=source)
    return bank


def _check_on(bank: SurfaceBank, model, *, force: bool, source: str) -> None:

    bank.check_model(model)
    check_base_model(bank.config.base_model, model_id(model), what=f"surfaces {source}", force=force)
    dev = layers_device(anatomy(model), bank.layers)  # None: split or offloaded (moved per layer)
    if dev is not None:
        bank.to(dev)
    check_forward_finite(model, bank, f"surfaces {source}")


def load(path: str | Path, model=None, *, force: bool = False, revision: str | None = None) -> SurfaceBank:
    """Read an artifact into a :class:`SurfaceBank` (float32). With ``model``: check that it fits the
    model's shapes and that the artifact's recorded base model is this model (errors name both; ``force``
    skips the name check, never the shape check) and move it to the model's device. A changed or truncated
    tensor file, non-finite coefficients and ranges without finite lo < hi are refused. It is not attached:
    use ``geosteer.steer(model, bank)`` or ``geosteer.manifold.install(model, bank=bank)``. Reads only.
    """
    folder = resolve(path if revision is None else f"{path}@{revision}")  # revision: of a Hub repo id
    return load_state(SURFACES, folder, model, force=force)


SURFACES = ArtifactFormat(FORMAT, VERSION, tensors=(TENSORS_NAME,), known_keys=tuple(sorted(_KNOWN)),
                          method="manifold", saves=SurfaceBank, to_state=to_state, from_state=from_state,
                          save=lambda bank, folder, **meta: save(bank, folder, **meta),
                          describe="geosteer.manifold.describe:describe_surfaces")
