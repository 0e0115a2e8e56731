"""geosteer's cache folder: models assembled from bundled packages, compiled kernels."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$GEOSTEER_CACHE``, else ``~/.cache/geosteer`` (not created here)."""
    return Path(os.environ.get("GEOSTEER_CACHE", Path.home() / ".cache" / "geosteer")).expanduser()
