"""``geosteer learn <learner>`` and ``geosteer measure <measurement>``: verbs grouped by noun, keyed by the
method registry (``Method.learners``/``Method.measures``), so a plugin method adds its verbs by declaring them.
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


def register(app: typer.Typer) -> None:
    """Add the ``learn`` and ``measure`` nouns to ``app``."""
    app.add_typer(learn_app, name="learn")
    app.add_typer(measure_app, name="measure")
