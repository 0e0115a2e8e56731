"""Training checkpoints: everything needed to continue a run exactly (one safetensors file, no pickle).

Tensors (``param/<name>``, ``optim/<index>/<key>``, ``rng/cpu``) plus one JSON document in the header
metadata (step, config, history, optimizer and scheduler state, the ``run`` record), written atomically.
A SHA-256 over the state and every tensor refuses a changed file in one line; :func:`check_run` refuses a
resume with another run record; older unverifiable checkpoints are refused.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import torch

from geosteer.errors import GeosteerError
from geosteer.io_utils import atomic_write_bytes
from geosteer.models.loading import model_id
from geosteer.train.config import RESUME_DEFAULTS, RESUME_KEYS, TrainConfig

CHECKPOINT_NAME = "checkpoint.safetensors"
LEGACY_NAME = "checkpoint.pt"  # torch pickle of geosteer < this format; read with weights_only=True
FORMAT = "geosteer-train-checkpoint/2"  # 2: SHA-256 in the metadata, the run record in the state
_OLD_FORMATS = ("geosteer-train-checkpoint/1",)
_META_KEY = "geosteer"
_DIGEST_KEY = "sha256"
_STATE_KEYS = {"format": str, "step": int, "params": dict, "optimizer": dict, "scheduler": dict,
               "rng": torch.Tensor, "signature": dict, "config": dict, "history": list, "data": str,
               "extra": dict, "run": dict}


def state_digest(doc_json: str, tensors: dict[str, torch.Tensor]) -> str:
    """SHA-256 over the state JSON text and each tensor's name, dtype, shape and raw bytes (sorted by name)."""
    h = hashlib.sha256(doc_json.encode("utf-8"))
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        h.update(f"\0{name}\0{t.dtype}\0{list(t.shape)}\0".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def run_record(model, **fields: Any) -> dict:
    """What ties a checkpoint to its run: the base model id plus ``fields`` (plain JSON data)."""

    return _jsonable({"base_model": model_id(model), **fields})


def check_run(state: dict, run: dict, path: Path) -> None:
    """Refuse a checkpoint recorded for another run (other base model, layout or options), naming the field."""
    saved = state.get("run") or {}
    for key in sorted(set(saved) | set(run)):
        if saved.get(key) != run.get(key):
            raise GeosteerError(f"cannot resume {path}: it belongs to another run ({key}: checkpoint "
                                f"{saved.get(key)!r}, now {run.get(key)!r}); resume with the same settings "
                                "or start again with --overwrite")


def resume_signature(cfg: TrainConfig) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k in RESUME_KEYS
            for v in [getattr(cfg, k)]}


def check_state_folder(folder: str | Path) -> Path:
    """Refuse, before any training, a run-state folder (``<out>.train``) that exists as something other than
    a folder (a file, a dangling link): the checkpoint and history could not be written into it."""
    folder = Path(folder)
    if (folder.exists() or folder.is_symlink()) and not folder.is_dir():
        what = "a link to nothing" if not folder.exists() else "a file"
        raise GeosteerError(f"the training state folder {folder} is {what}, not a folder; move it away or "
                            "choose another --out")
    return folder


def find_checkpoint(folder: str | Path) -> Path | None:
    """The checkpoint file in ``folder`` (the current format first, then a legacy ``checkpoint.pt``); a
    ``folder`` that is a file is refused (:func:`check_state_folder`)."""
    folder = check_state_folder(folder)
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
                    cfg: TrainConfig, history: list[dict], data_fingerprint: str, extra: dict | None = None,
                    run: dict | None = None) -> Path:
    """Write the run state to ``path`` (a ``.safetensors`` file) atomically; see the module docstring.
    ``run``: the record a resume must match (:func:`run_record`)."""
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
        "run": _jsonable(run or {}),
    }
    text = json.dumps(doc, allow_nan=True)
    data = st_save(tensors, metadata={"format": FORMAT, _META_KEY: text, _DIGEST_KEY: state_digest(text, tensors)})
    return atomic_write_bytes(path, data)


def load_checkpoint(path: str | Path) -> dict:
    """Read and validate a checkpoint; a foreign or malformed file is refused with one line, never run."""
    path = Path(path)
    if not path.is_file():
        raise GeosteerError(f"no checkpoint to resume from at {path}")
    if path.suffix == ".pt":
        _load_legacy(path)  # parsed as data only (a planted pickle is refused here, never run)
        raise _unverifiable(path)
    state = _load_safetensors(path)
    _validate(state, path)
    return state


def _unverifiable(path: Path) -> GeosteerError:
    return GeosteerError(f"{path} was written by an older geosteer without a checksum, so its numbers cannot be "
                         "verified and it is not resumed; start the run again (--overwrite)")


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
    if meta.get("format") in _OLD_FORMATS:
        raise _unverifiable(path)
    if meta.get("format") != FORMAT or _META_KEY not in meta:
        raise GeosteerError(f"{path} is not a geosteer training checkpoint (format {meta.get('format')!r}, "
                            f"expected {FORMAT!r})")
    if meta.get(_DIGEST_KEY) != state_digest(meta[_META_KEY], tensors):
        raise GeosteerError(f"{path} does not match its checksum: its tensors or state were changed after it was "
                            "written; it is not resumed (start again with --overwrite)")
    try:
        doc = json.loads(meta[_META_KEY])
    except (json.JSONDecodeError, RecursionError) as e:
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
                     path: Path, run: dict | None = None) -> None:
    """Refuse to resume a checkpoint made with another schedule, data, parameter set or run (``run``)."""
    if run is not None:
        check_run(state, run, path)
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
    _check_progress(state, cfg, path)


def _check_progress(state: dict, cfg: TrainConfig, path: Path) -> None:
    """The step, the schedule's position, the learning rates and the history must tell the same story."""
    step = state["step"]
    last = state["history"][-1].get("step") if state["history"] else None
    if last is not None and last != step:
        raise GeosteerError(f"cannot resume {path}: its step is {step} but its history ends at step {last}")
    epoch = state["scheduler"].get("last_epoch")
    if epoch != step:
        raise GeosteerError(f"cannot resume {path}: its schedule is at step {epoch!r}, its state at step {step}")
    want = cfg.lr * cfg.lr_factor(step)  # LambdaLR: lr = initial_lr * factor(last_epoch)
    for g in state["optimizer"]["param_groups"]:
        lr, initial = (g.get("lr"), g.get("initial_lr")) if isinstance(g, dict) else (None, None)
        number = isinstance(lr, (int, float)) and not isinstance(lr, bool)
        if initial != cfg.lr or not (number and math.isclose(lr, want, rel_tol=1e-9, abs_tol=1e-15)):
            raise GeosteerError(f"cannot resume {path}: its learning rate {lr!r} (initial {initial!r}) does not "
                                f"match step {step} of this run's schedule (lr {cfg.lr:g})")


def restore_state(state: dict, params: dict[str, torch.Tensor], opt, sched, path: Path) -> None:
    """Load a validated checkpoint's parameters, optimizer, schedule and RNG (one-line error if they do not fit)."""
    shapes = [tuple(p.shape) for p in params.values()]
    for idx, st in state["optimizer"]["state"].items():
        if not isinstance(idx, int) or not 0 <= idx < len(shapes) or not isinstance(st, dict):
            raise GeosteerError(f"cannot resume {path}: its optimizer state names parameter {idx!r}, "
                                f"valid 0..{len(shapes) - 1}")
        for key, t in st.items():
            if isinstance(t, torch.Tensor) and t.dim() > 0 and tuple(t.shape) != shapes[idx]:
                raise GeosteerError(f"cannot resume {path}: optimizer state {key} of parameter {idx} has "
                                    f"shape {tuple(t.shape)}, expected {shapes[idx]}")
    _check_optimizer_entries(state["optimizer"], opt, path)
    try:
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"])
    except (ValueError, KeyError, TypeError, RuntimeError) as e:
        raise GeosteerError(f"cannot resume {path}: its optimizer/schedule/RNG state does not fit this run "
                            f"({type(e).__name__})") from None
    with torch.no_grad():
        for k, p in params.items():
            p.copy_(state["params"][k].to(p.device, p.dtype))


def _required_state(opt, group: dict) -> set[str]:
    """The per-parameter state an optimizer's step reads once it has stepped (torch's Adam family), else
    nothing known."""
    if isinstance(opt, (torch.optim.Adam, torch.optim.AdamW)):
        return {"step", "exp_avg", "exp_avg_sq"} | ({"max_exp_avg_sq"} if group.get("amsgrad") else set())
    return set()


def _check_optimizer_entries(saved: dict, opt, path: Path) -> None:
    """Every saved per-parameter entry is empty (started fresh) or complete (each moment a tensor of the
    parameter's shape): a partial entry would end the first step in a ``KeyError``."""
    params = [p for g in opt.param_groups for p in g["params"]]
    group_of = [g for g in opt.param_groups for _ in g["params"]]
    for idx, st in saved["state"].items():
        if not st or not 0 <= idx < len(params):
            continue
        need = _required_state(opt, group_of[idx])
        missing = sorted(need - set(st))
        if missing:
            raise GeosteerError(f"cannot resume {path}: the optimizer state of parameter {idx} lacks "
                                f"{', '.join(missing)}; start again with --overwrite")
        for key in need - {"step"}:
            t = st[key]
            if not isinstance(t, torch.Tensor) or tuple(t.shape) != tuple(params[idx].shape):
                shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                raise GeosteerError(f"cannot resume {path}: optimizer state {key} of parameter {idx} is "
                                    f"{shape}, expected a tensor of shape {tuple(params[idx].shape)}")
