"""Training checkpoints: everything needed to continue a run exactly (atomic writes, one file).

A checkpoint holds the trainable parameters (by name), the optimizer and schedule state, the step, the
RNG state, the run's history and the config fields that fix the data order and the schedule. It is
written to a temporary file and renamed into place, so a kill during the save leaves the previous
checkpoint intact.
"""

from __future__ import annotations

import io
from pathlib import Path

import torch

from geosteer.errors import GeosteerError
from geosteer.io_utils import atomic_write_bytes
from geosteer.train.config import RESUME_KEYS, TrainConfig

CHECKPOINT_NAME = "checkpoint.pt"
FORMAT = "geosteer-train-checkpoint/1"


def resume_signature(cfg: TrainConfig) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k in RESUME_KEYS
            for v in [getattr(cfg, k)]}


def save_checkpoint(path: str | Path, *, step: int, params: dict[str, torch.Tensor], optimizer, scheduler,
                    cfg: TrainConfig, history: list[dict], data_fingerprint: str, extra: dict | None = None
                    ) -> Path:
    state = {
        "format": FORMAT,
        "step": step,
        "params": {k: v.detach().cpu().clone() for k, v in params.items()},
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "rng": torch.get_rng_state(),
        "signature": resume_signature(cfg),
        "config": cfg.to_dict(),
        "history": history,
        "data": data_fingerprint,
        "extra": extra or {},
    }
    buf = io.BytesIO()
    torch.save(state, buf)
    return atomic_write_bytes(path, buf.getvalue())


def load_checkpoint(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise GeosteerError(f"no checkpoint to resume from at {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - corrupt files raise many types
        raise GeosteerError(f"{path} is not a readable training checkpoint ({type(e).__name__})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise GeosteerError(f"{path} is not a geosteer training checkpoint")
    return state


def check_compatible(state: dict, cfg: TrainConfig, params: dict[str, torch.Tensor], data_fingerprint: str,
                     path: Path) -> None:
    """Refuse to resume a checkpoint made with another schedule, data or parameter set."""
    sig = resume_signature(cfg)
    diffs = [f"{k}: checkpoint {state['signature'].get(k)!r}, now {v!r}" for k, v in sig.items()
             if state["signature"].get(k) != v]
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
