"""``geosteer dynamics``: the tool verbs of :mod:`geosteer.dynamics.cli` (the method's ``Method.cli``).

The paper experiments are the method's studies (``Method.studies`` in :mod:`geosteer.dynamics.method`, their
commands in :mod:`geosteer.dynamics.studies`), run as ``geosteer study dynamics <name>``.
"""

from __future__ import annotations

import typer

from geosteer.dynamics.cli import dyn


def register(app: typer.Typer) -> None:
    app.add_typer(dyn, name="dynamics")
