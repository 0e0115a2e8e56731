"""The method registry: each method package declares, PEFT-style, what it adds to geosteer.

A :class:`Method` names its recipe keys (with defaults = the stock model) and the builder that turns their
values into interventions, its CLI (a module or function with ``register(app)``), and its artifact formats
(:class:`geosteer.artifacts.ArtifactFormat`). ``register_method`` is called by the package itself (in its
``method.py``, imported by its ``__init__``), so adding a method touches no central file: the recipe
(:mod:`geosteer.integrations.recipe`), the ``geosteer`` command and :func:`geosteer.artifacts.load_artifact`
all read this registry. Built-in packages are listed in :data:`BUILTIN`; installed packages can add
themselves through the ``geosteer.methods`` entry-point group (the entry point names a module to import).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

BUILTIN = ("geosteer.manifold", "geosteer.directional", "geosteer.dynamics")
ENTRY_POINT_GROUP = "geosteer.methods"
KINDS = ("any", "number", "layers", "folder", "text")


@dataclass(frozen=True)
class RecipeKey:
    """One ``key=value`` setting of a recipe. ``default`` is the stock setting (nothing attached).

    ``kind``: ``number`` (validated as a float), ``layers`` (a layer spec, parsed by the builder with
    :func:`geosteer.models.anatomy.parse_layers`), ``folder`` (an artifact folder: copied into a saved
    recipe and resolved inside it on load), ``text`` or ``any``. ``inline`` turns a value into a
    self-contained one when a recipe is saved (e.g. a JSON file of edits → the list it holds).
    """

    name: str
    default: Any = None
    help: str = ""
    kind: str = "any"
    inline: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"recipe key {self.name}: unknown kind '{self.kind}'; valid: {', '.join(KINDS)}")


Builder = Callable[[Any, dict], list]


@dataclass(frozen=True)
class Method:
    """What one method package adds (see the module docstring)."""

    name: str
    summary: str = ""
    keys: tuple[RecipeKey, ...] = ()
    build: Builder | None = None
    validate: Callable[[dict], None] | None = None
    cli: str | Callable | None = None
    artifacts: tuple = ()
    meta: Mapping[str, Any] = field(default_factory=dict)

    def defaults(self) -> dict:
        return {k.name: k.default for k in self.keys}


_METHODS: dict[str, Method] = {}
_loaded = False


def register_method(method: Method) -> Method:
    """Add ``method`` (re-registering the same name replaces it); its recipe keys must be new."""
    taken = {k.name: m.name for m in _METHODS.values() if m.name != method.name for k in m.keys}
    clash = sorted(k.name for k in method.keys if k.name in taken)
    if clash:
        raise ValueError(f"recipe keys already taken: {', '.join(clash)} (by {taken[clash[0]]})")
    from geosteer.artifacts import register_format

    for fmt in method.artifacts:
        register_format(fmt)
    _METHODS[method.name] = method
    return method


def unregister_method(name: str) -> None:
    """Remove a method (tests, plugins that unload); unknown names are ignored."""
    m = _METHODS.pop(name, None)
    if m is not None:
        from geosteer.artifacts import unregister_format

        for fmt in m.artifacts:
            unregister_format(fmt.name)


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for name in BUILTIN:
        importlib.import_module(name)
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        ep.load()


def methods() -> dict[str, Method]:
    """Every registered method: the built-ins in :data:`BUILTIN` order, then the others in registration
    order (so recipes build in the same order whatever was imported first)."""
    _load()
    builtin = [b.rsplit(".", 1)[-1] for b in BUILTIN]
    order = [n for n in builtin if n in _METHODS] + [n for n in _METHODS if n not in builtin]
    return {n: _METHODS[n] for n in order}


def recipe_keys() -> dict[str, tuple[Method, RecipeKey]]:
    """Every recipe key → (its method, its declaration)."""
    return {k.name: (m, k) for m in methods().values() for k in m.keys}
