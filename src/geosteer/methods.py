"""The method registry: each method package declares, PEFT-style, what it adds to geosteer.

A :class:`Method` (registered by the package's ``method.py``) names its recipe keys, its builder, its verbs
and its artifact formats; the recipe, the CLI and :func:`load_artifact` read only this registry. Built-ins
are :data:`BUILTIN`; installed packages use the ``geosteer.methods`` entry-point group. The format table
(each method's ``artifacts``, :data:`CORE_FORMATS`, :func:`register_format`) lives here too.
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

BUILTIN = ("geosteer.manifold", "geosteer.directional", "geosteer.dynamics", "geosteer.vectors", "geosteer.loreft")
ENTRY_POINT_GROUP = "geosteer.methods"
KINDS = ("any", "number", "layers", "folder", "text")
CORE_FORMATS = {"geosteer-recipe": "geosteer.recipe"}  # format -> the module that declares it (as FORMAT)
FLOAT32_MAX = 3.4028234663852886e38
NUMBER_BOUNDS = (-FLOAT32_MAX, FLOAT32_MAX)  # a number key's default bounds: float32's finite range


@dataclass(frozen=True)
class RecipeKey:
    """One ``key=value`` setting of a recipe; ``default`` is the stock setting (nothing attached).

    ``kind``: ``number``, ``layers``, ``folder`` (copied into a saved recipe), ``text`` or ``any``;
    ``inline`` makes a value self-contained when a recipe is saved; ``bounds``: the (low, high) a ``number``
    takes (default :data:`NUMBER_BOUNDS`, float32's finite range: what the kernels compute in).
    """

    name: str
    default: Any = None
    help: str = ""
    kind: str = "any"
    inline: Callable[[Any], Any] | None = None
    bounds: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"recipe key {self.name}: unknown kind '{self.kind}'; valid: {', '.join(KINDS)}")


Builder = Callable[..., list]  # build(model, values, *, force=False) -> interventions


@dataclass(frozen=True)
class Verb:
    """A learner (``geosteer learn <name>``) or measurement (``geosteer measure <name>``) of a method.

    ``command``: ``"module:function"``, a typer command function whose docstring is its help.
    """

    name: str
    command: str


@dataclass(frozen=True)
class Method:
    """What one method package adds. ``build(model, values, *, force)`` returns its interventions (``[]`` at
    the defaults); ``validate(values)`` checks values without a model; ``learners``/``measures`` are its verbs;
    ``examples(model, folder) -> {"neutral": values, "active": values}`` feeds the contract suite."""

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
