"""Training checkpoints: everything needed to continue a run exactly (atomic writes, one file, no code).

A checkpoint holds the trainable parameters (by name), the optimizer and schedule state, the step, the
RNG state, the run's history and the config fields that fix the data order and the schedule. It is one
``checkpoint.safetensors`` file: the tensors (``param/<name>``, ``optim/<index>/<key>``, ``rng/cpu`` as
uint8) plus one JSON document in the safetensors header metadata (step, config, signature, history,
optimizer param groups and scalar state, scheduler state). Nothing in it is pickled, so loading a planted
or foreign file can never run code: it is parsed as data and refused with one line when it does not have
exactly this shape. It is written to a temporary file and renamed into place, so a kill during the save
leaves the previous checkpoint intact.

Checkpoints written by older geosteer versions (``checkpoint.pt``, a torch pickle) are read with
``torch.load(weights_only=True)`` (tensors and plain containers only; any other object is refused
without being constructed) and validated the same way.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch

from geosteer.errors import GeosteerError
from geosteer.io_utils import atomic_write_bytes
from geosteer.train.config import RESUME_DEFAULTS, RESUME_KEYS, TrainConfig

CHECKPOINT_NAME = "checkpoint.safetensors"
LEGACY_NAME = "checkpoint.pt"  # torch pickle of geosteer < this format; read with weights_only=True
FORMAT = "geosteer-train-checkpoint/1"
_META_KEY = "geosteer"
_STATE_KEYS = {"format": str, "step": int, "params": dict, "optimizer": dict, "scheduler": dict,
               "rng": torch.Tensor, "signature": dict, "config": dict, "history": list, "data": str,
               "extra": dict}


def resume_signature(cfg: TrainConfig) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k in RESUME_KEYS
            for v in [getattr(cfg, k)]}


def find_checkpoint(folder: str | Path) -> Path | None:
    """The checkpoint file in ``folder`` (the current format first, then a legacy ``checkpoint.pt``)."""
    folder = Path(folder)
    for name in (CHECKPOINT_NAME, LEGACY_NAME):
        if (folder / name).exists():
            return folder / name
    return None


def _jsonable(obj: Any) -> Any:
    """Plain JSON data (tuples become lists, numbers stay exact: JSON floats round-trip via repr)."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, torch.Tensor):
        return obj.tolist()
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"checkpoint state holds a {type(obj).__name__}, which is not plain data")


def save_checkpoint(path: str | Path, *, step: int, params: dict[str, torch.Tensor], optimizer, scheduler,
                    cfg: TrainConfig, history: list[dict], data_fingerprint: str, extra: dict | None = None
                    ) -> Path:
    """Write the run state to ``path`` (a ``.safetensors`` file) atomically; see the module docstring."""
    from safetensors.torch import save as st_save

    tensors: dict[str, torch.Tensor] = {f"param/{k}": v.detach().cpu().clone().contiguous()
                                        for k, v in params.items()}
    opt = optimizer.state_dict()
    scalars: dict[str, dict] = {}
    for idx, st in opt["state"].items():
        for key, val in st.items():
            if isinstance(val, torch.Tensor):
                tensors[f"optim/{int(idx)}/{key}"] = val.detach().cpu().clone().contiguous()
            else:
                scalars.setdefault(str(int(idx)), {})[key] = _jsonable(val)
    tensors["rng/cpu"] = torch.get_rng_state().clone().contiguous()
    doc = {
        "format": FORMAT,
        "step": int(step),
        "optimizer": {"param_groups": _jsonable(opt["param_groups"]), "scalars": scalars,
                      "indices": sorted(int(i) for i in opt["state"])},
        "scheduler": _jsonable(scheduler.state_dict()),
        "signature": resume_signature(cfg),
        "config": cfg.to_dict(),
        "history": _jsonable(history),
        "data": data_fingerprint,
        "extra": _jsonable(extra or {}),
    }
    data = st_save(tensors, metadata={"format": FORMAT, _META_KEY: json.dumps(doc, allow_nan=True)})
    return atomic_write_bytes(path, data)


def load_checkpoint(path: str | Path) -> dict:
    """Read and validate a checkpoint; a foreign or malformed file is refused with one line, never run."""
    path = Path(path)
    if not path.is_file():
        raise GeosteerError(f"no checkpoint to resume from at {path}")
    state = _load_legacy(path) if path.suffix == ".pt" else _load_safetensors(path)
    _validate(state, path)
    return state


def _load_safetensors(path: Path) -> dict:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open has no iterator
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise GeosteerError(f"{path} is not a readable training checkpoint "
                            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'unreadable'})"
                            ) from None
    if meta.get("format") != FORMAT or _META_KEY not in meta:
        raise GeosteerError(f"{path} is not a geosteer training checkpoint (format {meta.get('format')!r}, "
                            f"expected {FORMAT!r})")
    try:
        doc = json.loads(meta[_META_KEY])
    except json.JSONDecodeError as e:
        raise GeosteerError(f"{path}: the checkpoint's state is not valid JSON ({e})") from None
    if not isinstance(doc, dict):
        raise GeosteerError(f"{path}: the checkpoint's state must be a JSON object")
    opt = doc.get("optimizer")
    if not isinstance(opt, dict) or not isinstance(opt.get("param_groups"), list):
        raise GeosteerError(f"{path}: the checkpoint lacks the optimizer state")
    try:
        state: dict[int, dict] = {int(i): {} for i in opt.get("indices", [])}
        for idx, vals in (opt.get("scalars") or {}).items():
            state.setdefault(int(idx), {}).update(vals)
    except (TypeError, ValueError, AttributeError):
        raise GeosteerError(f"{path}: the checkpoint's optimizer state is malformed") from None
    params: dict[str, torch.Tensor] = {}
    rng = None
    for name, t in tensors.items():
        kind, _, rest = name.partition("/")
        if kind == "param" and rest:
            params[rest] = t
        elif kind == "optim" and rest.count("/") == 1 and rest.split("/")[0].isdigit():
            idx, key = rest.split("/")
            state.setdefault(int(idx), {})[key] = t
        elif name == "rng/cpu":
            rng = t
        else:
            raise GeosteerError(f"{path}: unexpected tensor '{name}' in a training checkpoint")
    groups = opt["param_groups"]
    for g in groups:
        if isinstance(g, dict) and isinstance(g.get("betas"), list):
            g["betas"] = tuple(g["betas"])
    doc["optimizer"] = {"state": state, "param_groups": groups}
    doc["params"] = params
    doc["rng"] = rng
    return doc


def _load_legacy(path: Path) -> dict:
    """A ``checkpoint.pt`` from an older geosteer: tensors and plain containers only (no code runs)."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - corrupt or hostile files raise many types
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        why = "it holds objects other than tensors and plain data" if "weights_only" in str(e) else first
        raise GeosteerError(f"{path} is not a readable training checkpoint and was not loaded "
                            f"({type(e).__name__}: {why[:200]})") from None
    return state


def _validate(state: Any, path: Path) -> None:
    """Refuse anything that is not exactly a geosteer checkpoint (keys, types, tensors)."""
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise GeosteerError(f"{path} is not a geosteer training checkpoint")
    for key, typ in _STATE_KEYS.items():
        if key not in state:
            raise GeosteerError(f"{path}: the checkpoint lacks '{key}'")
        if not isinstance(state[key], typ) or (typ is int and isinstance(state[key], bool)):
            raise GeosteerError(f"{path}: the checkpoint's '{key}' is a {type(state[key]).__name__}, "
                                f"expected {typ.__name__}")
    if state["step"] < 0:
        raise GeosteerError(f"{path}: the checkpoint's step is {state['step']}, expected >= 0")
    if state["rng"].dtype != torch.uint8 or state["rng"].dim() != 1:
        raise GeosteerError(f"{path}: the checkpoint's RNG state is not a uint8 vector")
    for k, v in state["params"].items():
        if not isinstance(v, torch.Tensor):
            raise GeosteerError(f"{path}: parameter {k} is not a tensor")
        if v.is_floating_point() and not bool(torch.isfinite(v).all()):
            raise GeosteerError(f"{path}: parameter {k} holds NaN or infinite values")
    opt = state["optimizer"]
    if not isinstance(opt.get("state"), dict) or not isinstance(opt.get("param_groups"), list):
        raise GeosteerError(f"{path}: the checkpoint's optimizer state is malformed")
    for rec in state["history"]:
        if not isinstance(rec, dict):
            raise GeosteerError(f"{path}: the checkpoint's history is malformed")
        if isinstance(rec.get("loss"), float) and not math.isfinite(rec["loss"]):
            raise GeosteerError(f"{path}: the checkpoint's history holds a non-finite loss")


def check_compatible(state: dict, cfg: TrainConfig, params: dict[str, torch.Tensor], data_fingerprint: str,
                     path: Path) -> None:
    """Refuse to resume a checkpoint made with another schedule, data or parameter set."""
    sig = resume_signature(cfg)
    saved_sig = {**RESUME_DEFAULTS, **state["signature"]}  # keys that older checkpoints did not write yet
    diffs = [f"{k}: checkpoint {saved_sig.get(k)!r}, now {v!r}" for k, v in sig.items() if saved_sig.get(k) != v]
    if diffs:
        raise GeosteerError(f"cannot resume {path}: the run settings differ ({'; '.join(diffs)})")
    if state["data"] != data_fingerprint:
        raise GeosteerError(f"cannot resume {path}: the training text differs from the checkpoint's")
    saved = state["params"]
    if set(saved) != set(params):
        missing = sorted(set(params) - set(saved))[:3]
        extra = sorted(set(saved) - set(params))[:3]
        raise GeosteerError(f"cannot resume {path}: trainable parameters differ (missing in checkpoint: "
                            f"{missing}, unexpected: {extra})")
    for k, p in params.items():
        if tuple(saved[k].shape) != tuple(p.shape):
            raise GeosteerError(f"cannot resume {path}: parameter {k} has shape {tuple(saved[k].shape)} "
                                f"in the checkpoint, {tuple(p.shape)} now")
    if state["step"] > cfg.total_steps:
        raise GeosteerError(f"cannot resume {path}: it is at step {state['step']} of a "
                            f"{cfg.total_steps}-step run")
