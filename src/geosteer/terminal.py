"""The rich console geosteer prints through: the terminal's width on a terminal; when piped or redirected,
wide enough that no table column is cut or wrapped (rich would assume 80 columns)."""

from __future__ import annotations

import sys

PIPED_WIDTH = 10_000


def console():
    """A ``rich.console.Console`` on stdout (see the module docstring)."""
    from rich.console import Console

    isatty = getattr(sys.stdout, "isatty", None)
    return Console() if isatty and isatty() else Console(width=PIPED_WIDTH)
