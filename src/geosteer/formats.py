"""The artifact skeleton every method uses: :class:`ArtifactFormat`, the format registry, ``is_artifact``
and ``load_artifact`` (dispatch by the ``format`` a folder's config names). Re-exported by
:mod:`geosteer.artifacts`."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from geosteer.errors import ArtifactError

CONFIG_NAME = "geosteer_config.json"  # the one name (geosteer.artifacts.CONFIG_NAME is this constant)


@dataclass(frozen=True)
class ArtifactFormat:
    """One artifact format: name, version, the tensor files it must hold, its known config keys, a loader.

    The skeleton every method's artifact uses: :meth:`header` (the common config fields), :meth:`read`
    (version gate, unknown keys warned), :meth:`card` (the model card), and ``load(folder, model)``,
    which :func:`load_artifact` dispatches to by the ``format`` a folder's config names.
    """

    name: str
    version: int
    tensors: tuple[str, ...] = ()
    known_keys: tuple[str, ...] = ()
    load: Callable[[Path, Any], Any] | None = None
    method: str = ""

    def header(self) -> dict:
        from geosteer.artifacts import base_fields

        return base_fields(self.name, self.version)

    def read(self, folder: str | Path) -> dict:
        from geosteer.artifacts import read_config

        return read_config(folder, fmt=self.name, reader_version=self.version, known_keys=self.known_keys)

    def card(self, **card: Any) -> str:
        from geosteer.artifacts import render_model_card

        return render_model_card(method=self.method or self.name, **card)


_FORMATS: dict[str, ArtifactFormat] = {}


def register_format(fmt: ArtifactFormat) -> ArtifactFormat:
    _FORMATS[fmt.name] = fmt
    return fmt


def unregister_format(name: str) -> None:
    _FORMATS.pop(name, None)


def format_of(folder: str | Path) -> str | None:
    """The ``format`` a folder's config names, or None when it is not a readable geosteer artifact."""
    path = Path(folder) / CONFIG_NAME
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    return str(doc.get("format") or doc.get("method") or "") or None


def is_artifact(folder: str | Path, fmt: str | None = None) -> bool:
    """A folder with a readable config (of format ``fmt`` if given) and every tensor file its format needs."""
    folder = Path(folder)
    name = format_of(folder) if folder.is_dir() else None
    if name is None or (fmt is not None and name != fmt):
        return False
    from geosteer.methods import methods

    methods()  # the built-in formats register with their methods
    known = _FORMATS.get(name)
    return known is None or all((folder / t).is_file() for t in known.tensors)


def load_artifact(folder: str | Path, model: Any = None) -> Any:
    """Load any registered artifact by the format its config names (checked against ``model`` if given)."""
    from geosteer.methods import methods

    methods()
    name = format_of(folder)
    if name is None:
        raise ArtifactError(f"{folder} is not a geosteer artifact (missing or unreadable {CONFIG_NAME})")
    fmt = _FORMATS.get(name)
    if fmt is None or fmt.load is None:
        raise ArtifactError(f"{folder}: no loader for format '{name}'; known: {', '.join(sorted(_FORMATS))}")
    return fmt.load(Path(folder), model)
