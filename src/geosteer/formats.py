"""The lowest layer of the artifact skeleton: the one config file name and :func:`format_of`.

The format table and dispatch belong to :mod:`geosteer.methods`, the shared conventions to
:mod:`geosteer.artifacts`; both sit above this module, which imports only :mod:`geosteer.readers`.
"""

from __future__ import annotations

import json
from pathlib import Path

from geosteer.readers import ReadRefused, read_bytes

CONFIG_NAME = "geosteer_config.json"  # the one name (geosteer.artifacts.CONFIG_NAME is this constant)
MAX_CONFIG_BYTES = 64 << 20  # a larger file is not a geosteer config (geosteer.config_schema reads the same cap)

__all__ = ["CONFIG_NAME", "format_of"]


def format_of(folder: str | Path) -> str | None:
    """The ``format`` a folder's config names, or None when it is not a readable geosteer artifact (not a
    regular file, larger than :data:`MAX_CONFIG_BYTES`, not JSON or nested too deep)."""
    path = Path(folder) / CONFIG_NAME
    try:
        doc = json.loads(read_bytes(path, what="config", limit=MAX_CONFIG_BYTES).decode("utf-8"))
    except (ReadRefused, ValueError, RecursionError):  # RecursionError: nested too deep to be a config
        return None
    if not isinstance(doc, dict):
        return None
    return str(doc.get("format") or doc.get("method") or "") or None
