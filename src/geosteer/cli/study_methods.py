"""The paper studies that methods declare (``Method.studies``), run as ``geosteer study <method> <name>``.

Each study's command function (``Study.command``, ``"module:function"``) is imported when the CLI is built
and keeps its options.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable

import typer

from geosteer.cli.study import study_app
from geosteer.methods import Method, Study

_groups: dict[str, typer.Typer] = {}


def command_of(study: Study) -> Callable:
    """The typer command function a study names."""
    module, _, name = study.command.partition(":")
    return getattr(importlib.import_module(module), name)


def study_help(fn: Callable, study: Study) -> str:
    """The command's docstring, then the paper item it reproduces."""
    doc = inspect.getdoc(fn) or ""
    return f"{doc}\n\nPaper item: {study.paper}." if study.paper else doc


def _method_group(method: Method) -> typer.Typer:
    if method.name not in _groups:
        group = typer.Typer(no_args_is_help=True, help=f"Paper studies of {method.name}: {method.summary}.")
        for study in method.studies:
            fn = command_of(study)
            group.command(study.name, help=study_help(fn, study))(fn)
        study_app.add_typer(group, name=method.name)
        _groups[method.name] = group
    return _groups[method.name]


def add_studies(app: typer.Typer, method: Method) -> None:
    """Put ``method``'s studies under ``geosteer study <method>``."""
    if method.studies:
        _method_group(method)
