"""The paper studies of each method (:func:`geosteer_paper.registry.studies`), run as
``geosteer study <method> <name>``.

Each study's command function (``Study.command``, ``"module:function"``) is imported when the CLI is built
and keeps its options.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable

import typer

from geosteer.methods import methods
from geosteer_paper.registry import Study, studies

_groups: dict[str, typer.Typer] = {}


def command_of(study: Study) -> Callable:
    """The typer command function a study names."""
    module, _, name = study.command.partition(":")
    return getattr(importlib.import_module(module), name)


def study_help(fn: Callable, study: Study) -> str:
    """The command's docstring, then the paper item it reproduces."""
    doc = inspect.getdoc(fn) or ""
    return f"{doc}\n\nPaper item: {study.paper}." if study.paper else doc


def _method_group(study_app: typer.Typer, method: str, declared: tuple[Study, ...]) -> typer.Typer:
    if method not in _groups:
        summary = getattr(methods().get(method), "summary", "")
        group = typer.Typer(no_args_is_help=True, help=f"Paper studies of {method}" + (f": {summary}." if summary
                                                                                         else "."))
        for study in declared:
            fn = command_of(study)
            group.command(study.name, help=study_help(fn, study))(fn)
        study_app.add_typer(group, name=method)
        _groups[method] = group
    return _groups[method]


def add_studies(study_app: typer.Typer) -> None:
    """Put each method's studies under ``geosteer study <method>`` (methods added since the last call too)."""
    for method, declared in studies().items():
        _method_group(study_app, method, declared)
