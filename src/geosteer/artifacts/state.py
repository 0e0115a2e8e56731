"""The artifact protocol: an object's state as ``(config, tensors)``, and the one writer and reader of it.

``obj.to_state() -> (config, tensors)`` and ``Class.from_state(config, tensors, model=None, *, force=False,
source="")`` (with ``model``: shapes and base model checked). :func:`write_state` writes a folder atomically
(config with a SHA-256 of the tensors, safetensors, card); :func:`read_state` reads it back checked
(version, schema, checksum, non-empty tensors) without writing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from geosteer.artifacts.card import CARD_NAME, render_model_card
from geosteer.artifacts.config import base_fields, read_config
from geosteer.artifacts.hub import locate
from geosteer.errors import ArtifactError
from geosteer.formats import CONFIG_NAME
from geosteer.outputs import check_not_interrupted, check_output_folder, write_folder_atomic

__all__ = ["ArtifactFormat", "Stateful", "load_state", "read_state", "read_tensors", "sha256_file", "write_artifact",
           "write_state"]


@runtime_checkable
class Stateful(Protocol):
    """What an artifact-bearing object implements (see the module docstring)."""

    def to_state(self) -> tuple[dict, dict]: ...

    @classmethod
    def from_state(cls, config: dict, tensors: dict, model: Any = None, *, force: bool = False,
                   source: str = "") -> Any: ...


@dataclass(frozen=True)
class ArtifactFormat:
    """One artifact format: ``tensors`` (its file(s)), ``saves`` (the class it writes), optional own
    ``load``/``save`` or ``to_state``/``from_state`` functions, ``describe`` (for ``geosteer show``) and
    ``exports`` (``{".gguf": fn(ref, path)}``, ``geosteer show DIR --export FILE``)."""

    name: str
    version: int
    tensors: tuple[str, ...] = ()
    known_keys: tuple[str, ...] = ()
    load: Callable[[Path, Any], Any] | None = None
    method: str = ""
    saves: type | None = None
    save: Callable[..., Path] | None = None
    to_state: Callable[[Any], tuple[dict, dict]] | None = None
    from_state: Callable[..., Any] | None = None
    schema: type | None = None  # a pydantic model of the config (default: geosteer.config_schema.SCHEMAS[name])
    describe: Callable[[Any], dict] | str | None = None  # ref -> what it holds (geosteer show); "module:fn" too
    exports: dict[str, Callable[[Any, Path], Path]] = field(default_factory=dict, hash=False, compare=False)

    def __post_init__(self) -> None:
        if self.load is None and self.state_reader() is not None:
            object.__setattr__(self, "load", lambda folder, model: load_state(self, folder, model))
        if self.save is None and self.state_writer() is not None:
            object.__setattr__(self, "save", lambda obj, folder, **kw: write_state(self, obj, folder, **kw))

    def state_reader(self) -> Callable[..., Any] | None:
        return self.from_state or getattr(self.saves, "from_state", None)

    def state_writer(self) -> Callable[[Any], tuple[dict, dict]] | None:
        if self.to_state is not None:
            return self.to_state
        return getattr(self.saves, "to_state", None) if self.saves is not None else None

    def header(self) -> dict:
        return base_fields(self.name, self.version)

    def read(self, folder: str | Path) -> dict:
        return read_config(folder, fmt=self.name, reader_version=self.version, known_keys=self.known_keys,
                           schema=self.schema)

    def card(self, **card: Any) -> str:
        return render_model_card(method=self.method or self.name, **card)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_state(fmt: ArtifactFormat, obj: Any, folder: str | Path, *, overwrite: bool = True,
                card: str | Callable[[dict], str] | None = None) -> Path:
    """Write ``obj``'s state (``to_state``) as the artifact folder ``folder`` of ``fmt`` (see
    :func:`write_artifact`). ``card``: the model card (text, or a function of the config; default:
    ``obj.model_card(config)`` when it has one, else a generic card)."""
    folder = _check_target(fmt, folder, overwrite)
    writer = fmt.state_writer()
    if writer is None:
        raise ArtifactError(f"format {fmt.name} declares no to_state")
    fields, tensors = writer(obj)
    own = getattr(obj, "model_card", None)
    return write_artifact(fmt, folder, fields, tensors, overwrite=overwrite,
                          card=card if card is not None else own if callable(own) else None)


def _check_target(fmt: ArtifactFormat, folder: str | Path, overwrite: bool) -> Path:
    folder = Path(folder)
    if folder.suffix == ".safetensors" or folder.name == CONFIG_NAME:
        raise ArtifactError(f"{folder}: an artifact is a folder; pass the folder name (e.g. "
                            f"{folder.parent / folder.stem})")
    return check_output_folder(folder, fmt.name, overwrite=overwrite, what="output folder")


def write_artifact(fmt: ArtifactFormat, folder: str | Path, fields: dict, tensors: dict, *,
                   overwrite: bool = True, card: str | Callable[[dict], str] | None = None,
                   fill_more: Callable[[Path, dict], None] | None = None) -> Path:
    """The one writer: ``folder`` holds the config (the format's header + ``fields``, the SHA-256 of the tensor
    file, the names of what was written), ``tensors`` in the format's tensor file, the model card, and what
    ``fill_more(tmp, config)`` adds (a recipe's copied folders; it may change the config). Written atomically,
    never over files geosteer did not record writing (checked before any work and again before the rename)."""
    from safetensors.torch import save_file

    folder = _check_target(fmt, folder, overwrite)
    config = {**fmt.header(), **fields}
    tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    if tensors and not fmt.tensors:
        raise ArtifactError(f"format {fmt.name} names no tensor file for its {len(tensors)} tensors")

    def fill(tmp: Path) -> None:
        if tensors:
            save_file(tensors, str(tmp / fmt.tensors[0]),
                      metadata={"format": fmt.name, "version": str(config["version"])})
            config["sha256"] = sha256_file(tmp / fmt.tensors[0])
        if fill_more is not None:
            fill_more(tmp, config)
        (tmp / CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        text = card(config) if callable(card) else card
        if text is None:
            text = fmt.card(base_model=str(config.get("base_model")), files=[CONFIG_NAME, *fmt.tensors[:1]])
        (tmp / CARD_NAME).write_text(text, encoding="utf-8")

    return write_folder_atomic(folder, fill, overwrite=overwrite, kind=fmt.name)


def read_tensors(path: Path, *, expected_sha256: str | None = None) -> dict:
    """The tensors of a safetensors file, refused in one line when it is missing, not a regular file, not
    safetensors, truncated (half copied), changed since it was written (``expected_sha256``), or holds an
    empty tensor (each format's ``from_state`` checks values, e.g. finiteness, where it can name the place).
    Read-only."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not path.is_file():
        raise ArtifactError(f"{path} is missing or not a regular file")
    if expected_sha256 is not None and sha256_file(path) != expected_sha256:
        raise ArtifactError(f"{path} does not match its config (checksum differs): the artifact was modified "
                            "or only partly copied")
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        first = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        raise ArtifactError(f"{path} is not a readable safetensors file (truncated, or another format: "
                            f"{first})") from None
    for name, t in tensors.items():
        if t.numel() == 0:
            raise ArtifactError(f"{path}: tensor '{name}' is empty (shape {tuple(t.shape)})")
    return tensors


def read_state(fmt: ArtifactFormat, ref: str | Path) -> tuple[Path, dict, dict]:
    """``(folder, config, tensors)`` of an artifact folder (or Hub repo id) of ``fmt``, all checked (see
    :func:`read_tensors`); nothing is written, renamed or removed."""
    folder = locate(ref)
    check_not_interrupted(folder)
    if not folder.is_dir():
        raise ArtifactError(f"no {fmt.name} artifact at {folder} (no such folder)")
    if not (folder / CONFIG_NAME).is_file():
        raise ArtifactError(f"{folder} is not a {fmt.name} artifact (missing {CONFIG_NAME})")
    config = fmt.read(folder)
    tensors: dict = {}
    if fmt.tensors:
        digest = config.get("sha256")
        tensors = read_tensors(folder / fmt.tensors[0], expected_sha256=digest if isinstance(digest, str) else None)
    return folder, config, tensors


def load_state(fmt: ArtifactFormat, ref: str | Path, model: Any = None, *, force: bool = False) -> Any:
    """The object an artifact folder of ``fmt`` holds: :func:`read_state`, then its class's ``from_state``."""
    folder, config, tensors = read_state(fmt, ref)
    reader = fmt.state_reader()
    if reader is None:
        raise ArtifactError(f"format {fmt.name} declares no from_state")
    return reader(config, tensors, model, force=force, source=str(folder))
