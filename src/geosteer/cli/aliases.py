"""Old spellings of moved verbs: hidden commands that run the same function and then print one ``note:``
line naming the new spelling (a ``DeprecationWarning``, printed by :func:`geosteer.cli.common.run_app`
after the result and dropped on an error)."""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable

import typer


def warning_alias(fn: Callable, old: str, new: str) -> Callable:
    """``fn`` with the same signature, warning that ``geosteer {old}`` is now ``geosteer {new}``."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        warnings.warn(f"`geosteer {old}` is now `geosteer {new}`; the old spelling goes in the next release",
                      DeprecationWarning, stacklevel=1)  # from geosteer: run_app notes it
        return fn(*args, **kwargs)

    return run


def add_hidden_alias(app: typer.Typer, old: str, new: str, fn: Callable) -> None:
    """Register ``fn`` on ``app`` as the hidden command named by the last word of ``old``."""
    app.command(old.split()[-1], hidden=True,
                help=f"(old spelling of `geosteer {new}`) {inspect.getdoc(fn) or ''}")(warning_alias(fn, old, new))
