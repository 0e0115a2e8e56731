"""The rich console geosteer prints through: the terminal's width on a terminal; when piped or redirected
(CI logs, files), :data:`PIPED_WIDTH` columns. Tables fold a cell that does not fit rather than cut it, so
no value is lost at any width; ``--json`` is the machine-readable form."""

from __future__ import annotations

import sys

PIPED_WIDTH = 100


def console():
    """A ``rich.console.Console`` on stdout (see the module docstring)."""
    from rich.console import Console

    isatty = getattr(sys.stdout, "isatty", None)
    return Console() if isatty and isatty() else Console(width=PIPED_WIDTH)
