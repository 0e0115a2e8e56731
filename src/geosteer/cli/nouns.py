"""``geosteer learn <learner>`` and ``geosteer measure <measurement>``: verbs grouped by noun, keyed by the method
registry.

Each method declares its learners (``Method.learners``) and measurements (``Method.measures``) as
:class:`geosteer.methods.Verb` entries naming a typer command function; :func:`add_verbs` puts them under the
two nouns, so a plugin method adds ``geosteer learn <its learner>`` by declaring it. The learners share their
options through :mod:`geosteer.cli.learning`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import typer

from geosteer.methods import Method, Verb

learn_app = typer.Typer(no_args_is_help=True, help="Learn an artifact on a frozen model: surfaces, walls, "
                        "steering surfaces, ∥/⊥ scales, steering vectors, FFN gates.")
measure_app = typer.Typer(no_args_is_help=True, help="Measure a model (or its surfaces): ∥/⊥ decomposition, "
                          "FFN steering-field diagnostics, surface sensitivity and coverage.")
NOUNS = {"learners": learn_app, "measures": measure_app}
_added: dict[str, set[str]] = {noun: set() for noun in NOUNS}


def command_of(verb: Verb) -> Callable:
    """The typer command function a verb names (``"module:function"``)."""
    module, _, name = verb.command.partition(":")
    return getattr(importlib.import_module(module), name)


def add_verbs(app: typer.Typer, method: Method) -> None:
    """Put ``method``'s learners under ``geosteer learn`` and its measurements under ``geosteer measure``."""
    for noun, group in NOUNS.items():
        for verb in getattr(method, noun):
            if verb.name not in _added[noun]:
                group.command(verb.name)(command_of(verb))
                _added[noun].add(verb.name)


def remove_verbs(method: Method) -> None:
    """Take ``method``'s verbs off the two nouns again (a plugin that unloads, tests)."""
    for noun, group in NOUNS.items():
        names = {v.name for v in getattr(method, noun)}
        group.registered_commands[:] = [c for c in group.registered_commands if c.name not in names]
        _added[noun] -= names


def register(app: typer.Typer) -> None:
    """Add the ``learn`` and ``measure`` nouns to ``app``."""
    app.add_typer(learn_app, name="learn")
    app.add_typer(measure_app, name="measure")
