"""CLI verbs for studies 2 and 3 (compression-error decomposition, training-time parallel removal)."""

from __future__ import annotations

import typer


def register(sub: typer.Typer) -> None:
    """Add the study verbs to the ``geosteer directional`` sub-app (filled in as the studies land)."""
    return None
