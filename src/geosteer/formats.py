"""The lowest layer of the artifact skeleton: the one config file name and :func:`format_of`.

:class:`~geosteer.methods.ArtifactFormat`, the format table and the dispatch by the ``format`` a folder's
config names (``load_artifact``, ``is_artifact``, ``register_format``) belong to the registry,
:mod:`geosteer.methods`; the shared conventions (config gate, cards, atomic folders, Hub) to
:mod:`geosteer.artifacts`. Both sit above this module, which imports nothing of geosteer.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

CONFIG_NAME = "geosteer_config.json"  # the one name (geosteer.artifacts.CONFIG_NAME is this constant)
MAX_CONFIG_BYTES = 64 << 20  # a larger file is not a geosteer config (geosteer.config_schema reads the same cap)

__all__ = ["CONFIG_NAME", "format_of", "read_regular"]


def read_regular(path: str | Path, limit: int = MAX_CONFIG_BYTES) -> bytes:
    """The bytes of ``path`` when it is a regular file (or a link to one) of at most ``limit`` bytes; an
    ``OSError`` otherwise. A FIFO, a device such as ``/dev/zero`` or a folder is refused without blocking
    or reading it (opened non-blocking, checked with ``fstat`` on the open file)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit} bytes", str(path))
    return data


def format_of(folder: str | Path) -> str | None:
    """The ``format`` a folder's config names, or None when it is not a readable geosteer artifact (not a
    regular file, larger than :data:`MAX_CONFIG_BYTES`, not JSON or nested too deep)."""
    path = Path(folder) / CONFIG_NAME
    try:
        doc = json.loads(read_regular(path).decode("utf-8"))
    except (OSError, ValueError, RecursionError):  # RecursionError: nested too deep to be a config
        return None
    if not isinstance(doc, dict):
        return None
    return str(doc.get("format") or doc.get("method") or "") or None
