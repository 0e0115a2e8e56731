"""``geosteer dynamics``: the sub-app of :mod:`geosteer.dynamics.cli` with the verbs of its sibling modules.

The method's ``cli`` entry (``Method.cli``): it sits above ``cli.py`` and the ``cli_*.py`` modules, which share
``cli.py``'s helpers, so that no CLI module of the package imports another one back.
"""

from __future__ import annotations

import typer

from geosteer.dynamics import cli_continuation, cli_geometry, cli_prefix
from geosteer.dynamics.cli import dyn


def register(app: typer.Typer) -> None:
    cli_geometry.add_commands(dyn)  # critical | commutator | pressure | gain-depth
    cli_prefix.add_commands(dyn)  # prefix-spread | anchors | edit-...
    cli_continuation.add_commands(dyn)  # continuation | basins | phase
    app.add_typer(dyn, name="dynamics")
