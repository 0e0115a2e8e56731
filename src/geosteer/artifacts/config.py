"""The artifact config: the version gate and schema check, the base-model check, the common header."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from geosteer.config_schema import SCHEMAS, read_config_json, validate_config
from geosteer.errors import ArtifactError
from geosteer.formats import CONFIG_NAME
from geosteer.models.identity import declared_bases, model_key
from geosteer.outputs import FILES_KEY, check_not_interrupted
from geosteer.version import __version__

COMMON_KEYS = frozenset({"format", "version", "geosteer_version", "commit", "created", "card", "sha256", FILES_KEY})


class ArtifactWarning(UserWarning):
    """An artifact has keys this version of geosteer does not know (written by a newer one)."""


def check_config(doc: Mapping[str, Any], *, fmt: str, reader_version: int, known_keys: Iterable[str],
                 source: str | Path = "artifact", schema: type | None = None) -> list[str]:
    """Validate an artifact config: ``format`` must equal ``fmt``, ``version`` ≤ ``reader_version``.

    Then every field is checked against the format's schema (:data:`geosteer.config_schema.SCHEMAS`: types,
    bounds, unique sorted layers, the base model present). Keys outside ``known_keys`` (and outside the common
    ones) are reported with one :class:`ArtifactWarning` and returned; they never make loading fail.
    """
    if not isinstance(doc, Mapping):
        raise ArtifactError(f"{source}: {CONFIG_NAME} must hold a JSON object, got {type(doc).__name__}")
    if doc.get("format") != fmt:
        raise ArtifactError(f"{source} is not a {fmt} artifact ({CONFIG_NAME} has format "
                            f"{str(doc.get('format'))[:80]!r}, expected {fmt!r})")
    version = doc.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int):
        raise ArtifactError(f"{source}: version must be an integer, got {str(version)[:40]}")
    if version > reader_version:
        raise ArtifactError(f"{source} was written by a newer geosteer ({fmt} version {version}; "
                            f"this one reads versions up to {reader_version}): upgrade geosteer to load it")
    if version < 1:
        raise ArtifactError(f"{source}: version must be >= 1, got {version}")
    schema = schema or SCHEMAS.get(fmt)
    if schema is not None:
        validate_config(doc, schema, source)
    unknown = sorted(set(doc) - COMMON_KEYS - set(known_keys))
    if unknown:
        warnings.warn(f"{source}: ignoring keys unknown to this geosteer ({', '.join(unknown)}); "
                      "the artifact was probably written by a newer version", ArtifactWarning, stacklevel=2)
    return unknown


def check_base_model(recorded: str | None, current: str | None, *, what: str = "this artifact",
                     force: bool = False) -> None:
    """Refuse an artifact made for another base model (shapes can match by chance).

    Aliases, Hub ids and the bases ``current`` declares (:func:`geosteer.models.loading.declared_bases`)
    match both ways; nothing is checked when either is unknown or ``force`` is set.
    """
    if force or not recorded or not current or model_key(recorded) == model_key(current):
        return

    if any(model_key(recorded) == model_key(b) for b in declared_bases(current)):
        return
    raise ArtifactError(f"{what} was made for base model '{recorded}', not for '{current}' (the model it is "
                        "being loaded on); load that model, declare a fine-tuned folder's base (CLI --base-model; "
                        "base_model in its README card or geosteer_base_model in its config.json; load_model(..., "
                        "base_model=...)), or pass force=True (CLI: --force) to use it anyway")


def read_config(folder: str | Path, **check: Any) -> dict:
    """Read ``folder/geosteer_config.json`` and run :func:`check_config` with ``check`` (fmt=..., ...)."""
    folder = Path(folder)
    check_not_interrupted(folder)
    path = folder / CONFIG_NAME
    if not path.is_file():
        raise ArtifactError(f"{folder} is not a geosteer artifact (missing {CONFIG_NAME})")
    doc = read_config_json(path)
    if check:
        check_config(doc, source=folder, **check)
    return doc


def base_fields(fmt: str, version: int) -> dict:
    """The common header of every config: format, version, geosteer version, creation time (UTC)."""
    import datetime as _dt

    return {"format": fmt, "version": int(version), "geosteer_version": __version__,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
