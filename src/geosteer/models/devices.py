"""Where a model and its inputs live: dtype and device names checked in one line, and the device that input
ids go to (also under accelerate's offload hooks)."""

from __future__ import annotations

import torch

from geosteer.errors import GeosteerError
from geosteer.models.anatomy import unwrap_peft

_DTYPE_NAMES = {"float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
                "bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": torch.float16,
                "fp16": torch.float16, "half": torch.float16, "float64": torch.float64}


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype | str:
    """``torch.dtype``, ``"auto"`` (the checkpoint's own dtype), or a name such as ``"bf16"``."""
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    name = str(dtype).lower().removeprefix("torch.")
    if name == "auto":
        return "auto"
    if name not in _DTYPE_NAMES:
        raise GeosteerError(f"unknown dtype '{dtype}'; valid: auto, {', '.join(_DTYPE_NAMES)}")
    return _DTYPE_NAMES[name]


def resolve_device(device: str | torch.device | None) -> torch.device:
    """Check that ``device`` exists on this machine (one-line error otherwise)."""
    try:
        dev = torch.device(device if device is not None else "cpu")
    except (RuntimeError, TypeError) as e:
        raise GeosteerError(f"invalid device '{device}' ({str(e).splitlines()[0]})") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise GeosteerError(f"device '{device}' is not available: this torch build sees no CUDA GPU")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise GeosteerError(f"device '{device}' is not available: {torch.cuda.device_count()} CUDA GPU(s)")
    elif dev.type == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise GeosteerError(f"device '{device}' is not available on this machine")
    elif dev.type not in ("cpu", "cuda", "mps", "xpu", "meta"):
        if not getattr(getattr(torch, dev.type, None), "is_available", lambda: False)():
            raise GeosteerError(f"device '{device}' is not available on this machine")
    return dev



def input_device(model) -> torch.device:
    """Where input ids go: the device of the input embeddings (the first layer of a dispatched model).

    With accelerate's offload hooks the weights sit on ``meta`` until used; the hook's execution device is
    the answer then.
    """

    base = unwrap_peft(model)
    emb = base.get_input_embeddings() if hasattr(base, "get_input_embeddings") else None
    if emb is not None:
        hook = getattr(emb, "_hf_hook", None)
        dev = getattr(hook, "execution_device", None)
        if dev is not None:
            return torch.device(dev if not isinstance(dev, int) else f"cuda:{dev}")
        w = getattr(emb, "weight", None)
        if w is not None and w.device.type != "meta":
            return w.device
    for p in base.parameters():
        if p.device.type != "meta":
            return p.device
    return torch.device("cpu")
