"""What an artifact folder holds (``geosteer show``): the format's own describer, or the generic one.

A describer reads only (the same checks as a load: version gate, schema, checksum) and returns JSON-able
data: scalars, and lists of row dicts that the CLI prints as tables. The generic one gives the config's
fields and one row per tensor (shape, dtype, norm; the values of a small 1-D tensor, e.g. gates or scales).
"""

from __future__ import annotations

import importlib
from pathlib import Path

from geosteer.artifacts.state import ArtifactFormat, read_state

SMALL = 32  # 1-D tensors up to this many values are listed whole
_SKIP = ("format", "sha256", "files")


def _describer(fmt: ArtifactFormat):
    spec = fmt.describe
    if isinstance(spec, str):
        module, _, name = spec.partition(":")
        return getattr(importlib.import_module(module), name)
    return spec


def tensor_rows(tensors: dict) -> list[dict]:
    """One row per tensor: name, shape, dtype, Frobenius norm (and the values of a small 1-D tensor)."""
    rows = []
    for name, t in sorted(tensors.items()):
        row = {"tensor": name, "shape": "x".join(map(str, t.shape)) or "scalar", "dtype": str(t.dtype).removeprefix(
            "torch."), "norm": float(t.float().norm()) if t.is_floating_point() else None}
        if t.dim() <= 1 and t.numel() <= SMALL:
            row["values"] = [round(float(x), 6) for x in t.reshape(-1).tolist()]
        rows.append(row)
    return rows


def describe_state(fmt: ArtifactFormat, ref: str | Path) -> dict:
    """The generic description: the config's fields (checked as a load checks them) and the tensors."""
    folder, config, tensors = read_state(fmt, ref)
    info = {"artifact": str(ref), "format": fmt.name}
    info.update({k: v for k, v in config.items() if k not in _SKIP})
    if tensors:
        info["tensors"] = tensor_rows(tensors)
    return info


def describe(fmt: ArtifactFormat, ref: str | Path) -> dict:
    """``fmt``'s own description of the artifact at ``ref`` if it declares one, else :func:`describe_state`."""
    fn = _describer(fmt)
    if fn is None:
        return describe_state(fmt, ref)
    return {"artifact": str(ref), "format": fmt.name, **fn(ref)}
