"""Inline recipes: a request's ``geosteer_recipe`` as an object of recipe keys, exactly what ``--set`` takes.

A folder-valued key names an ``--artifact NAME=DIR`` or a folder under an ``--allow-root``; other paths,
symlinks out, Hub ids and unknown keys are refused in one line. An admitted recipe becomes its canonical
text, built once and kept (bounded). Attention operations are served only from recipes named at start.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from geosteer.errors import GeosteerError
from geosteer.io_utils import link_leaving
from geosteer_vllm.plan import NAME, NAME_RULE

MAX_KEYS = 64
MAX_VALUE = 4096  # characters of one value
_MAX_WALK = 10_000  # entries of an allowed folder looked at for links that leave the roots


@dataclass
class Policy:
    """What inline recipes may name: artifacts by name, and folders under the allowed roots."""

    artifacts: dict[str, str] = field(default_factory=dict)
    roots: list[str] = field(default_factory=list)

    def describe(self) -> str:
        names = ", ".join(sorted(self.artifacts)) or "none"
        roots = ", ".join(self.roots) or "none"
        return f"artifacts given to the server: {names}; folders under: {roots}"


def parse_artifact_args(items: list[str]) -> dict[str, str]:
    """``["NAME=DIR", ...]`` -> {NAME: resolved DIR}."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, folder = item.partition("=")
        name = name.strip()
        if not sep or not NAME.fullmatch(name) or name in out:
            raise GeosteerError(f"--artifact needs NAME=DIR with a unique NAME of {NAME_RULE} (got {item[:120]!r})")
        if not Path(folder).is_dir():
            raise GeosteerError(f"--artifact {name}: folder not found: {folder}")
        out[name] = str(Path(folder).resolve())
    return out


def check_artifacts(policy: Policy, model) -> None:
    """Build each ``--artifact`` on ``model`` (a weightless copy of the served model) as the recipe of it
    alone, as a request naming it would: a folder that is no artifact of a folder key, values that are not
    finite, an artifact made for another model, or one inline recipes cannot use is one line."""
    from geosteer.formats import format_of
    from geosteer.recipe import RECIPE, load_recipe
    from geosteer_vllm.plan import plan_spec

    for name, folder in policy.artifacts.items():
        where = f"--artifact {name}={folder}"
        fmt = format_of(folder)
        if fmt is None or fmt == RECIPE.name:
            raise GeosteerError(f"{where}: not an artifact a folder key takes (a steering-vectors, gates or "
                                "learned-scales folder with its geosteer_config.json); serve a recipe with --recipe")
        try:
            spec, _ = load_recipe(folder)
            plan = plan_spec(name, spec, model, folder, key=f"artifact:{name}")
        except (GeosteerError, ValueError, OSError) as e:
            raise GeosteerError(f"{where}: {e}") from None
        if plan.attention_layers:
            raise GeosteerError(f"{where}: a {fmt} artifact acts inside attention, which inline recipes cannot "
                                "use; serve it with --recipe NAME=DIR")


def check_roots(items: list[str]) -> list[str]:
    for root in items:
        if not Path(root).is_dir():
            raise GeosteerError(f"--allow-root: folder not found: {root}")
    return [str(Path(r).resolve()) for r in items]


def _folder(key: str, value: object, policy: Policy) -> str:
    if not isinstance(value, str) or not value or "\x00" in value:
        raise GeosteerError(f"{key} must name an artifact; {policy.describe()}")
    if value in policy.artifacts:
        return policy.artifacts[value]
    p = Path(value)
    for root in policy.roots:
        try:
            target = (p if p.is_absolute() else Path(root) / p).resolve()
            if target.is_relative_to(root) and target.is_dir() and _stays_inside(target, policy.roots):
                return str(target)
        except (OSError, ValueError):  # a name the system cannot look up (too long): no artifact
            continue
    raise GeosteerError(f"{key}={value[:80]!r}: not an artifact this server may load; {policy.describe()}")


def _stays_inside(folder: Path, roots: list[str]) -> bool:
    """No link under ``folder`` leads out of ``roots`` (bounded walk)."""
    try:
        return link_leaving(folder, [Path(r) for r in roots], _MAX_WALK) is None
    except ValueError:
        return False


def _text(key: str, value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) and value is not None:
        raise GeosteerError(f"{key}: a recipe value is a string or a number (got {type(value).__name__})")
    if isinstance(value, float) and not math.isfinite(value):
        raise GeosteerError(f"{key}: a number must be finite (got {value})")
    text = "none" if value is None else str(value)
    if len(text) > MAX_VALUE:
        raise GeosteerError(f"{key}: value longer than {MAX_VALUE} characters")
    return text


def canonical(doc: object, policy: Policy) -> str:
    """The canonical text of an inline recipe object; one line (a GeosteerError) when it is not valid."""
    from geosteer.methods import recipe_keys
    from geosteer.recipe import parse_settings, valid_keys_text

    if not isinstance(doc, dict):
        raise GeosteerError("geosteer_recipe must be a recipe name or an object of recipe keys")
    if len(doc) > MAX_KEYS:
        raise GeosteerError(f"an inline recipe has at most {MAX_KEYS} keys")
    keys = recipe_keys()
    settings = []
    for key, value in doc.items():
        if key not in keys:
            raise GeosteerError(f"unknown recipe key {str(key)[:80]!r}; valid keys: {valid_keys_text()}")
        if keys[key][1].kind == "folder" and value is not None:
            value = _folder(key, value, policy)
        settings.append(f"{key}={_text(key, value)}")
    spec = parse_settings(settings)
    return json.dumps(spec.changed(), sort_keys=True, separators=(",", ":"), default=str)


def plan_inline(canon: str, model):
    """Build an admitted inline recipe (:func:`canonical`'s text) on ``model`` (a weightless model)."""
    from geosteer.recipe import InterventionSpec
    from geosteer_vllm.plan import plan_spec

    spec = InterventionSpec.from_dict(json.loads(canon))
    return plan_spec("inline", spec, model, "inline", key=f"inline:{canon}")
