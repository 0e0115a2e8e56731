"""The paper studies that methods declare (``Method.studies``), run as ``geosteer study <method> <name>``.

Each study's command function (``Study.command``, ``"module:function"``) is imported when the CLI is built
and keeps its options. Its old spelling (``Study.old``, e.g. ``dynamics critical``) stays a hidden alias
that runs the same command and then prints one ``note:`` line on stderr (none on an error).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable

import typer

from geosteer.cli.aliases import add_hidden_alias
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


def _subgroup(app: typer.Typer, path: list[str]) -> typer.Typer | None:
    for name in path:
        found = [g.typer_instance for g in app.registered_groups if g.name == name]
        if not found:
            return None
        app = found[-1]
    return app


def _command_name(info) -> str:
    return info.name or info.callback.__name__.lower().replace("_", "-")


def _add_alias(app: typer.Typer, study: Study, new: str) -> None:
    *parents, name = study.old.split()
    group = _subgroup(app, parents)
    if group is None:
        return
    group.registered_commands[:] = [c for c in group.registered_commands if _command_name(c) != name]
    add_hidden_alias(group, study.old, new, command_of(study))


def add_studies(app: typer.Typer, method: Method) -> None:
    """Put ``method``'s studies under ``geosteer study <method>`` and their old spellings, hidden, on ``app``."""
    if not method.studies:
        return
    _method_group(method)
    for study in method.studies:
        if study.old:
            _add_alias(app, study, f"study {method.name} {study.name}")
