"""An intervention recipe: every intervention a run applies, as flat ``key=value`` settings.

The same settings drive the verbs (``--recipe``, ``--set``), the lm-eval model_args and the recipe artifact.
The keys are those the registered methods declare (:func:`geosteer.methods.recipe_keys`); layer lists may
use ``;`` because model_args split on ``,``.

    spec = InterventionSpec(scale_site="attn_out", scale_par=0.0)
    with geosteer.steer(model, *spec.build(model)): ...
"""

from __future__ import annotations

import math
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from torch import nn

from geosteer.artifacts import CONFIG_NAME, ArtifactFormat, ArtifactWarning, is_repo_id, locate, push, write_artifact
from geosteer.errors import ArtifactError, GeosteerError
from geosteer.formats import format_of
from geosteer.io_utils import link_leaving
from geosteer.methods import NUMBER_BOUNDS, Method, RecipeKey, methods, recipe_keys, register_method
from geosteer.models.anatomy import parse_layers
from geosteer.shipped import names as shipped_names
from geosteer.shipped import shipped

__all__ = ["FORMAT", "RECIPE", "InterventionSpec", "load_recipe", "parse_settings", "save_recipe"]

def _describe_recipe(ref: str | Path) -> dict:
    """What a recipe folder holds (``geosteer show``): its base model and the settings that differ from the
    stock model."""
    spec, doc = load_recipe(ref)
    return {"base_model": doc.get("base_model"), "settings": spec.changed()}


RECIPE = ArtifactFormat("geosteer-recipe", 1, known_keys=("base_model", "interventions"), method="recipe",
                        load=lambda folder, model: load_recipe(folder)[0], describe=_describe_recipe)
FORMAT = RECIPE  # what geosteer.methods.CORE_FORMATS reads: the registry declares this format
VERSION = RECIPE.version

Builder = Callable[[nn.Module, dict], list]


def register_builder(name: str, keys: Sequence[str], build: Builder) -> None:
    """Shorthand for :func:`geosteer.methods.register_method` with plain keys (default None): ``build``
    gets the model and the keys that were given, and is not called when none was."""
    def only_given(model: nn.Module, values: dict, *, force: bool = False) -> list:
        given = {k: v for k, v in values.items() if v is not None}
        return build(model, given) if given else []

    register_method(Method(name, keys=tuple(RecipeKey(k) for k in keys), build=only_given))


def _num(name: str, v: Any, bounds: tuple[float, float] | None = None) -> float:
    """``v`` as a finite float within ``bounds`` (default :data:`~geosteer.methods.NUMBER_BOUNDS`, float32's
    range); booleans (``true`` in a JSON recipe), non-finite values and values out of bounds are refused."""
    if isinstance(v, bool):
        raise GeosteerError(f"{name} must be a number, not a boolean (got {v!r})")
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):
        raise GeosteerError(f"{name} must be a number (got {_short(v)})") from None
    lo, hi = bounds or NUMBER_BOUNDS
    if not (math.isfinite(x) and lo <= x <= hi):
        where = "" if bounds else " (float32's range)"
        raise GeosteerError(f"{name} must be a finite number in {_bound_text(lo)} to {_bound_text(hi)}{where} "
                            f"(got {_short(v)})")
    return x


def _bound_text(x: float) -> str:
    return f"{x:g}" if abs(x) >= 1e16 else str(int(x)) if x == int(x) else repr(x)


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _check_value(name: str, key: RecipeKey, v: Any) -> Any:
    """A value of ``key`` in its kind (numbers as floats), checked as far as it can be without a model."""
    if v is None:
        return None
    if key.kind == "number":
        return _num(name, v, key.bounds)
    if key.kind == "layers" and isinstance(v, str):
        try:
            parse_layers(v, 1 << 20)  # the syntax; the range is checked against the model when built
        except (GeosteerError, ValueError) as e:
            raise GeosteerError(f"{name}: {e}") from None
    if key.kind == "folder" and isinstance(v, (str, Path)) and not _names_folder(v):
        shown = str(v) if len(str(v)) <= 200 and str(v).isprintable() else _short(str(v))  # the path as typed
        raise GeosteerError(f"{name}={shown}: no such folder (give an artifact folder, a Hub repo id "
                            f"org/name[@revision] or a shipped artifact: {', '.join(shipped_names())})")
    return v


def _names_folder(v: str | Path) -> bool:
    """Whether ``v`` names a folder, a Hub repo id or a shipped artifact; a name the system cannot look up
    (longer than a file name may be, a NUL) names none."""
    try:
        return Path(v).is_dir() or is_repo_id(v) or shipped(v) is not None
    except (OSError, ValueError):
        return False


def valid_keys_text() -> str:
    return ", ".join(f"{k} ({key.kind})" for k, (_, key) in recipe_keys().items())


class InterventionSpec:
    """The interventions of one run: values of the registered recipe keys (the rest at their defaults,
    i.e. the stock model). Keys read as attributes: ``spec.scale_site``."""

    def __init__(self, extra: Mapping[str, Any] | None = None, **values: Any) -> None:
        values = {**dict(extra or {}), **values}
        keys = recipe_keys()
        unknown = sorted(set(values) - set(keys))
        if unknown:
            raise GeosteerError(f"unknown recipe keys: {', '.join(unknown)}; valid: {', '.join(keys)}")
        self.values = values

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "values":
            raise AttributeError(name)
        keys = recipe_keys()
        if name not in keys:
            raise AttributeError(f"InterventionSpec has no key '{name}'")
        return self.values.get(name, keys[name][1].default)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, InterventionSpec) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return f"InterventionSpec({', '.join(f'{k}={v!r}' for k, v in self.values.items())})"

    @classmethod
    def pop_from(cls, args: dict) -> InterventionSpec:
        """Take the recipe keys out of ``args``; the rest stays for the caller."""
        spec = cls(**{k: args.pop(k) for k in recipe_keys() if k in args})
        spec.validate()
        return spec

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> InterventionSpec:
        spec = cls(**dict(d))
        spec.validate()
        return spec

    def with_values(self, **values: Any) -> InterventionSpec:
        """A copy with ``values`` set on top (validated)."""
        spec = InterventionSpec(**{**self.values, **values})
        spec.validate()
        spec._recipe = getattr(self, "_recipe", None)  # the recipe folder it came from, and its base model
        return spec

    def to_dict(self) -> dict:
        """Every key with its value (the default where none was given)."""
        return {k: getattr(self, k) for k in recipe_keys()}

    def changed(self) -> dict:
        """The keys whose value is not the stock default."""
        return {k: v for k, v in self.to_dict().items() if v != recipe_keys()[k][1].default}

    def section(self, method: Method) -> dict:
        return {k.name: getattr(self, k.name) for k in method.keys}

    def validate(self) -> None:
        """Check every value as far as it can be without a model (kinds, then each method's own check)."""
        for name, (_, key) in recipe_keys().items():
            if name in self.values:
                self.values[name] = _check_value(name, key, self.values[name])
        for method in methods().values():
            if method.validate is not None:
                method.validate(self.section(method))

    def build(self, model: nn.Module, *, force: bool = False) -> list:
        """The interventions, method by method in registration order (manifold, directional, dynamics,
        then plugins), each in its own fixed order. Not attached yet. ``force`` goes to builders that take
        it (artifacts recorded for another base model); a spec read from a recipe folder is refused on
        another base model than the recipe's unless ``force``."""
        origin = getattr(self, "_recipe", None)
        if origin is not None:
            from geosteer.artifacts import check_base_model
            from geosteer.models.loading import model_id

            try:
                check_base_model(origin[1], model_id(model), what=f"recipe {origin[0]}", force=force)
            except ArtifactError:  # a recipe recorded with the model's folder: the folder it was loaded from
                path = getattr(model.config, "_name_or_path", None)
                if not path or not Path(str(origin[1])).is_dir():
                    raise
                check_base_model(origin[1], str(path), what=f"recipe {origin[0]}", force=force)
        out: list = []
        for method in methods().values():
            if method.build is not None:
                out.extend(method.build(model, self.section(method), force=force))
        return out

    def attach(self, model: nn.Module, *, force: bool = False) -> Callable[[], None]:
        """Build the interventions and attach them in order (the :class:`~geosteer.interventions.Intervention`
        protocol, so ``geosteer.steer(model, geosteer.load(recipe_folder, model=model))`` runs a recipe);
        the returned ``remove`` detaches them in reverse order. A failure part-way detaches what was attached."""
        removers: list[Callable[[], None]] = []

        def remove() -> None:
            while removers:
                removers.pop()()

        try:
            for iv in self.build(model, force=force):
                removers.append(iv.attach(model))
        except BaseException:
            remove()
            raise
        return remove

    def save(self, folder: str | Path, *, base_model: str, **card: Any) -> Path:
        """Write this recipe as a self-contained folder (see :func:`save_recipe`)."""
        return save_recipe(folder, self, base_model=base_model, **card)

    def push_to_hub(self, repo_id: str, *, base_model: str, private: bool = True, token: str | None = None,
                    revision: str | None = None, commit_message: str | None = None, **card: Any) -> str:
        """Save into a temporary folder and upload it to the Hub repo ``repo_id``; return its URL."""

        with tempfile.TemporaryDirectory(prefix="geosteer-push-") as tmp:
            folder = self.save(Path(tmp) / "recipe", base_model=base_model, **card)
            return push(folder, repo_id, private=private, token=token, revision=revision,
                        commit_message=commit_message or "Upload geosteer recipe")


def parse_settings(settings: Iterable[str], base: InterventionSpec | None = None) -> InterventionSpec:
    """``["key=value", ...]`` (the CLI's ``--set``) on top of ``base``: known keys, values of their kind."""
    keys = recipe_keys()
    values: dict[str, Any] = {}
    for item in settings:
        name, sep, raw = str(item).partition("=")
        name = name.strip()
        if not sep or not name:
            raise GeosteerError(f"--set {item!r}: expected key=value; valid keys: {valid_keys_text()}")
        if name not in keys:
            raise GeosteerError(f"--set {name}: unknown recipe key; valid keys: {valid_keys_text()}")
        raw = raw.strip()
        values[name] = None if raw.lower() in ("", "none") and keys[name][1].default is None else raw
    try:
        return (base or InterventionSpec()).with_values(**values)
    except GeosteerError as e:
        raise GeosteerError(f"{e}; valid keys: {valid_keys_text()}") from None


def _folder_keys() -> list[str]:
    return [k for k, (_, key) in recipe_keys().items() if key.kind == "folder"]


def save_recipe(folder: str | Path, spec: InterventionSpec, *, base_model: str, command: str | None = None,
                ppl_before: float | None = None, ppl_after: float | None = None, summary: str = "") -> Path:
    """Write a self-contained recipe folder: the surfaces/gates it names are copied in, edits inlined."""
    d = spec.to_dict()
    for name, (_, key) in recipe_keys().items():
        if key.inline is not None and d[name] is not None:
            d[name] = key.inline(d[name])

    files = [CONFIG_NAME]

    def copy_folders(tmp: Path, config: dict) -> None:
        for key in _folder_keys():
            if d[key] is not None:
                shutil.copytree(locate(d[key]), tmp / key)
                files.extend(f"{key}/{p.name}" for p in sorted((tmp / key).iterdir()))
                d[key] = key

    def card(config: dict) -> str:
        defaults = {k: key.default for k, (_, key) in recipe_keys().items()}
        return RECIPE.card(base_model=base_model, summary=summary or "A geosteer intervention recipe.",
                           ppl_before=ppl_before, ppl_after=ppl_after, command=command, files=files,
                           extra={k: v for k, v in d.items() if v != defaults[k]})

    return write_artifact(RECIPE, folder, {"base_model": base_model, "interventions": d}, {}, card=card,
                          fill_more=copy_folders)


def _artifact_key(fmt: str | None) -> str | None:
    """The recipe key that takes an artifact of format ``fmt`` (``surfaces`` for surfaces, ``vectors`` for
    steering vectors, ...): the one folder key of the method the format belongs to; None for a recipe or
    anything else."""
    if fmt is None or fmt == RECIPE.name:
        return None
    for m in methods().values():
        if any(f.name == fmt for f in m.artifacts):
            folder_keys = [k.name for k in m.keys if k.kind == "folder"]
            return folder_keys[0] if len(folder_keys) == 1 else None
    return None


def load_recipe(folder: str | Path, *, allow_outside: bool = False) -> tuple[InterventionSpec, dict]:
    """``(spec, config)`` of a recipe folder, Hub repo id or shipped name (a one-method artifact is read as
    the recipe of it alone). Folder keys must stay inside the recipe unless ``allow_outside=True``; the spec
    keeps the base model, which :meth:`InterventionSpec.build` checks."""
    local = not is_repo_id(folder)
    folder = locate(folder)
    key = _artifact_key(format_of(folder))
    if key is not None:  # an artifact of one method (surfaces, vectors, ...): the recipe of that artifact
        return InterventionSpec.from_dict({key: str(folder)}), {"format": RECIPE.name, "base_model": None,
                                                               "interventions": {key: str(folder)}}
    doc = RECIPE.read(folder)
    inter = doc.get("interventions") or {}
    if not isinstance(inter, Mapping):
        raise ArtifactError(f"{folder}: interventions must be a JSON object of recipe keys")
    inter = dict(inter)
    known = set(recipe_keys())
    for k in sorted(set(inter) - known):  # keys of a newer recipe: warned by check_config's convention
        warnings.warn(f"{folder}: ignoring unknown intervention key '{k}'", ArtifactWarning, stacklevel=2)
        inter.pop(k)
    # a Hub snapshot's files are links into the repo's cache folder (its blobs): that folder is the bound
    root = folder if local else folder.parent.parent
    for key in _folder_keys():
        if inter.get(key) is not None:
            inter[key] = str(_inner_folder(folder, root, key, inter[key], allow_outside))
    try:
        spec = InterventionSpec.from_dict(inter)
    except GeosteerError as e:
        raise ArtifactError(f"{folder}: {e}") from None
    spec._recipe = (str(folder), doc.get("base_model"))
    return spec, doc


_MAX_WALK = 100_000  # entries of a recipe's nested folder looked at for links that leave it


def _inner_folder(folder: Path, root: Path, key: str, value: Any, allow_outside: bool) -> Path:
    """The folder that a recipe's folder key ``value`` names, checked to lie inside ``root``."""
    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        raise ArtifactError(f"{folder}: {key} must name a folder inside the recipe (got {value!r})")
    p = Path(value)
    target = p if p.is_absolute() else folder / p
    if allow_outside:
        return target
    hint = (f"a recipe's folders lie inside it; give an outside folder on the command line (--set {key}=PATH) "
            "or load_recipe(..., allow_outside=True)")
    if p.is_absolute() or ".." in p.parts:
        raise ArtifactError(f"{folder}: {key}={value} lies outside the recipe folder; {hint}")
    bound = root.resolve()
    if not target.resolve().is_relative_to(bound):
        raise ArtifactError(f"{folder}: {key}={value} is a link to {target.resolve()}, outside the recipe "
                            f"folder; {hint}")
    try:
        q = link_leaving(target, [bound], _MAX_WALK)
    except ValueError:
        raise ArtifactError(f"{folder}: {key} holds more than {_MAX_WALK} files; not a recipe's folder") from None
    if q is not None:
        raise ArtifactError(f"{folder}: {q.relative_to(folder)} is a link to {q.resolve()}, outside "
                            f"the recipe folder; {hint}")
    _check_inner_format(folder, key, value, target)
    return target


def _check_inner_format(folder: Path, key: str, value: Any, target: Path) -> None:
    """A recipe's folder key names an artifact of a format its method takes, never the recipe itself."""
    if target.resolve() == folder.resolve():
        raise ArtifactError(f"{folder}: {key}={value} is the recipe folder itself; it must name the {key} "
                            "artifact's own folder inside the recipe")
    want = sorted(f.name for f in recipe_keys()[key][0].artifacts)
    got = format_of(target) if target.is_dir() else None
    if want and got not in want:
        held = f"a {got} artifact" if got else "no geosteer artifact" if target.is_dir() else "nothing"
        raise ArtifactError(f"{folder}: {key}={value} holds {held}; {key} takes a {' or '.join(want)} artifact")
