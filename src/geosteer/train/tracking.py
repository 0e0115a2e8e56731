"""Experiment trackers for the training loop through accelerate (``TrainConfig(log_with="tensorboard")``):
per-step loss, lr, gradient norm, throughput and evaluations; nothing is imported unless asked for, and a
missing tracker package is a one-line error before the run.
"""

from __future__ import annotations

from pathlib import Path

from geosteer.errors import GeosteerError

# tracker name (accelerate's LoggerType) -> modules of which one must be importable, and how to get one
TRACKERS: dict[str, tuple[tuple[str, ...], str]] = {
    "tensorboard": (("tensorboard", "tensorboardX"), "pip install 'geosteer[track]'"),
    "wandb": (("wandb",), "pip install wandb"),
    "mlflow": (("mlflow",), "pip install mlflow"),
    "comet_ml": (("comet_ml",), "pip install comet_ml"),
    "aim": (("aim",), "pip install aim"),
    "clearml": (("clearml",), "pip install clearml"),
    "dvclive": (("dvclive",), "pip install dvclive"),
    "swanlab": (("swanlab",), "pip install swanlab"),
    "trackio": (("trackio",), "pip install trackio"),
}
NEEDS_DIR = ("tensorboard", "aim")  # trackers that write into a local folder (accelerate's project_dir)


def check_trackers(names: tuple[str, ...]) -> None:
    """Refuse unknown tracker names (ValueError listing the valid ones)."""
    unknown = [n for n in names if n not in TRACKERS]
    if unknown:
        raise ValueError(f"unknown tracker {unknown[0]!r} in log_with; valid: {', '.join(TRACKERS)}")


def require_trackers(names: tuple[str, ...]) -> None:
    """One-line :class:`geosteer.extras.MissingDependency` when a requested tracker's package is absent."""
    from geosteer.extras import MissingDependency, available

    for name in names:
        modules, how = TRACKERS[name]
        if not any(available(m) for m in modules):
            raise MissingDependency(f"--log-with {name} needs the package '{modules[0]}', which is not "
                                    f"installed: {how}")


def tracker_dir(names: tuple[str, ...], log_dir: str | None, out_dir: str | Path | None) -> str | None:
    """The folder file-based trackers write into: ``log_dir``, else ``<out_dir>/logs``."""
    if log_dir is not None:
        return str(log_dir)
    if out_dir is not None:
        return str(Path(out_dir) / "logs")
    needs = [n for n in names if n in NEEDS_DIR]
    if needs:
        raise GeosteerError(f"--log-with {needs[0]} writes files: give an output folder or TrainConfig.log_dir")
    return None


def tracker_config(cfg_dict: dict) -> dict:
    """The run config as trackers accept it (scalars only: lists become comma-separated strings; TensorBoard's
    hparams refuse lists)."""
    out = {}
    for k, v in cfg_dict.items():
        if isinstance(v, (list, tuple)):
            v = ",".join(str(x) for x in v)
        out[k] = v
    return out
