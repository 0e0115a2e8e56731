"""The method registry: each method package declares, PEFT-style, what it adds to geosteer.

A :class:`Method` names its recipe keys (with defaults = the stock model) and the builder that turns their
values into interventions, its CLI (a module or function with ``register(app)``), and its artifact formats
(:class:`ArtifactFormat`). ``register_method`` is called by the package itself (in its
``method.py``, imported by its ``__init__``), so adding a method touches no central file: the recipe
(:mod:`geosteer.recipe`), the ``geosteer`` command and :func:`load_artifact` all read this registry.
Built-in packages are listed in :data:`BUILTIN`; installed packages can add themselves through the
``geosteer.methods`` entry-point group (the entry point names a module to import).

The format table lives here too (:class:`~geosteer.artifacts.ArtifactFormat`, re-exported): every method's
``artifacts``, the core formats of :data:`CORE_FORMATS`
(the recipe) and any :func:`register_format` adds. :func:`load_artifact` fills the registry before it
looks a format up, so loading never depends on what a user happened to import first.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from geosteer.artifacts import ArtifactFormat, check_not_interrupted, locate, push
from geosteer.artifacts.describe import describe
from geosteer.errors import ArtifactError
from geosteer.formats import CONFIG_NAME, format_of

BUILTIN = ("geosteer.manifold", "geosteer.directional", "geosteer.dynamics", "geosteer.vectors")
ENTRY_POINT_GROUP = "geosteer.methods"
KINDS = ("any", "number", "layers", "folder", "text")
CORE_FORMATS = {"geosteer-recipe": "geosteer.recipe"}  # format -> the module that declares it (as FORMAT)


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


Builder = Callable[..., list]  # build(model, values, *, force=False) -> interventions


@dataclass(frozen=True)
class Verb:
    """One tool verb a method declares under a noun: a learner (``geosteer learn <name>``, in
    ``Method.learners``) or a measurement (``geosteer measure <name>``, in ``Method.measures``).

    ``command``: ``"module:function"``, a typer command function (imported only when the CLI is built); its
    docstring is its help. A learner writes an artifact through the shared learner options of
    :mod:`geosteer.cli.learning`.
    """

    name: str
    command: str


@dataclass(frozen=True)
class Method:
    """What one method package adds (see the module docstring). ``build(model, values, *, force)`` returns
    the interventions for the values of its keys (``[]`` at the defaults); ``force`` (use artifacts recorded
    for another base model) is what ``InterventionSpec.build(force=...)`` passes.
    ``validate(values)`` checks its keys' values without a model (raises on a bad one).
    ``learners`` / ``measures``: its verbs of
    ``geosteer learn`` / ``geosteer measure`` (:class:`Verb`; a name is taken by one method only).
    ``examples``: ``"module:function"`` (or the function),
    ``examples(model, folder) -> {"neutral": values, "active": values}``: recipe values that attach something
    but give the stock logits, and values that change them (artifacts saved under ``folder`` through the
    format's writer); the contract suite (``tests/core/test_method_contract.py``) runs every method on them."""

    name: str
    summary: str = ""
    keys: tuple[RecipeKey, ...] = ()
    build: Builder | None = None
    validate: Callable[[dict], None] | None = None
    cli: str | Callable | None = None
    artifacts: tuple = ()
    meta: Mapping[str, Any] = field(default_factory=dict)
    examples: str | Callable[[Any, Path], dict] | None = None
    learners: tuple[Verb, ...] = ()
    measures: tuple[Verb, ...] = ()

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
    for noun in ("learners", "measures"):
        taken = {v.name: m.name for m in _METHODS.values() if m.name != method.name for v in getattr(m, noun)}
        clash = sorted(v.name for v in getattr(method, noun) if v.name in taken)
        if clash:
            raise ValueError(f"{noun} already taken: {', '.join(clash)} (by {taken[clash[0]]})")
    _METHODS[method.name] = method
    return method


def unregister_method(name: str) -> None:
    """Remove a method (tests, plugins that unload); unknown names are ignored."""
    _METHODS.pop(name, None)


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


_EXTRA_FORMATS: dict[str, ArtifactFormat] = {}


def register_format(fmt: ArtifactFormat) -> ArtifactFormat:
    """Add a format that belongs to no method (a method declares its own in ``Method.artifacts``)."""
    _EXTRA_FORMATS[fmt.name] = fmt
    return fmt


def unregister_format(name: str) -> None:
    _EXTRA_FORMATS.pop(name, None)


def formats() -> dict[str, ArtifactFormat]:
    """Every known artifact format by name: the core ones, each method's, then those registered alone."""
    out: dict[str, ArtifactFormat] = {}
    for module in CORE_FORMATS.values():
        fmt = importlib.import_module(module).FORMAT
        out[fmt.name] = fmt
    for m in methods().values():
        out.update({f.name: f for f in m.artifacts})
    out.update(_EXTRA_FORMATS)
    return out


def is_artifact(folder: str | Path, fmt: str | None = None) -> bool:
    """A folder with a readable config (of format ``fmt`` if given) and every tensor file its format needs."""
    folder = Path(folder)
    name = format_of(folder) if folder.is_dir() else None
    if name is None or (fmt is not None and name != fmt):
        return False
    known = formats().get(name)
    return known is None or all((folder / t).is_file() for t in known.tensors)


def load_artifact(folder: str | Path, model: Any = None) -> Any:
    """Load any registered artifact by the format its config names (checked against ``model`` if given)."""
    check_not_interrupted(folder)
    name = format_of(folder)
    if name is None:
        raise ArtifactError(f"{folder} is not a geosteer artifact (missing or unreadable {CONFIG_NAME})")
    table = formats()
    fmt = table.get(name)
    if fmt is None or fmt.load is None:
        raise ArtifactError(f"{folder}: no loader for format '{name}'; known: {', '.join(sorted(table))}")
    return fmt.load(Path(folder), model)


def artifact_format(ref: str | Path) -> tuple[Path, ArtifactFormat]:
    """The folder ``ref`` (a folder, a shipped name or a Hub repo id) names and the format it is written in."""
    folder = locate(ref)
    check_not_interrupted(folder)
    if not folder.is_dir():
        raise ArtifactError(f"{ref}: no such folder")
    name = format_of(folder)
    if name is None:
        raise ArtifactError(f"{ref} is not a geosteer artifact (missing or unreadable {CONFIG_NAME})")
    table = formats()
    if name not in table:
        raise ArtifactError(f"{ref}: unknown artifact format '{name}'; known: {', '.join(sorted(table))}")
    return folder, table[name]


def describe_artifact(ref: str | Path) -> dict:
    """What the artifact at ``ref`` holds, by its format's describer (:mod:`geosteer.artifacts.describe`);
    reads only."""
    folder, fmt = artifact_format(ref)
    return describe(fmt, folder)


def export_artifact(ref: str | Path, path: str | Path) -> Path:
    """Write the artifact at ``ref`` as the file ``path`` in another format, chosen by the file's suffix among
    the exports its format declares (steering vectors: ``.gguf``, llama.cpp's control-vector file)."""
    folder, fmt = artifact_format(ref)
    suffix = Path(path).suffix.lower()
    if suffix not in fmt.exports:
        valid = ", ".join(sorted(fmt.exports)) or "none"
        raise ArtifactError(f"a {fmt.name} artifact cannot be exported as '{suffix or Path(path).name}'; "
                            f"its exports: {valid}")
    return fmt.exports[suffix](folder, Path(path))


def save_artifact(obj: Any, folder: str | Path, **kw: Any) -> Path:
    """Write ``obj`` as the artifact folder of its format (found by its class among the known formats)."""
    table = formats()
    for fmt in table.values():
        if fmt.saves is not None and fmt.save is not None and isinstance(obj, fmt.saves):
            return fmt.save(obj, folder, **kw)
    savers = sorted(f.saves.__name__ for f in table.values() if f.saves is not None and f.save is not None)
    raise ArtifactError(f"no artifact format saves a {type(obj).__name__}; known: {', '.join(savers)}")


def push_artifact(obj: Any, repo_id: str, *, private: bool = True, token: str | None = None,
                  revision: str | None = None, commit_message: str | None = None, **kw: Any) -> str:
    """Save ``obj`` (see :func:`save_artifact`; ``kw`` goes to its writer) into a temporary folder and upload
    it to the Hub repo ``repo_id``; return the repo URL."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="geosteer-push-") as tmp:
        folder = save_artifact(obj, Path(tmp) / "artifact", **kw)
        return push(folder, repo_id, private=private, token=token, revision=revision,
                    commit_message=commit_message or f"Upload geosteer {type(obj).__name__}")


def load(ref: str | Path, model: Any = None) -> Any:
    """The object an artifact folder (or Hub repo id ``org/name[@revision]``) holds, whatever its format:
    a surfaces bank, FFN gates, an :class:`~geosteer.recipe.InterventionSpec`, a plugin's object; checked
    against ``model`` when given. ``geosteer.load`` is this function."""
    return load_artifact(locate(ref), model)
