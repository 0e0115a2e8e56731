"""Artifacts: the one reader and writer of geosteer's artifact folders (PEFT-style).

An artifact is a folder: ``geosteer_config.json`` (``format``, an integer ``version``, the ``files`` its
writer put there) + a ``*.safetensors`` tensor file + a generated model card ``README.md``. Each method
declares its format (:class:`ArtifactFormat`) and the state of its objects (``to_state`` /
``from_state``, :mod:`geosteer.artifacts.state`); this package does the rest:

- :mod:`~geosteer.artifacts.config` — :func:`check_config` (version gate, schema, unknown keys warned),
  :func:`check_base_model`, :func:`read_config`, :func:`base_fields`. Adding keys never bumps ``version``;
  it is bumped only for a change an older reader would misread, and such an artifact is refused in one line.
- :mod:`~geosteer.artifacts.state` — :func:`write_state` / :func:`read_state` / :func:`load_state`.
- :mod:`~geosteer.artifacts.describe` — :func:`describe`: what a folder holds (``geosteer show``).
- :mod:`~geosteer.artifacts.card` — :func:`render_model_card` / :func:`write_model_card` (Hub metadata).
- :mod:`~geosteer.artifacts.hub` — :func:`locate` / :func:`resolve` / :func:`push` (local path or Hub repo
  id ``org/name[@revision]``; ``HF_HUB_OFFLINE=1`` honoured).
- :func:`write_folder_atomic` (from :mod:`geosteer.outputs`): a whole folder through a temporary sibling
  and a rename, never over files geosteer did not record writing. Loading never writes: a folder a killed
  save left missing is refused with one line (:func:`check_not_interrupted`); the next save, or
  :func:`recover_folder`, repairs it.

The format table and the dispatch by a folder's ``format`` belong to the method registry
(:func:`geosteer.methods.load_artifact`, :func:`geosteer.load`).
"""

from __future__ import annotations

from geosteer.artifacts.card import CARD_NAME, render_model_card, write_model_card
from geosteer.artifacts.config import (
    ArtifactWarning,
    base_fields,
    check_base_model,
    check_config,
    read_config,
)
from geosteer.artifacts.hub import hub_offline, is_repo_id, locate, push, resolve, split_repo_ref
from geosteer.artifacts.state import (
    ArtifactFormat,
    Stateful,
    load_state,
    read_state,
    read_tensors,
    sha256_file,
    write_artifact,
    write_state,
)
from geosteer.formats import CONFIG_NAME, format_of
from geosteer.outputs import (
    FILES_KEY,
    check_not_interrupted,
    check_output_folder,
    folder_kind,
    recover_folder,
    write_folder_atomic,
)

__all__ = [
    "CARD_NAME", "CONFIG_NAME", "FILES_KEY", "ArtifactFormat", "ArtifactWarning", "Stateful", "base_fields",
    "check_base_model", "check_config", "check_not_interrupted", "check_output_folder", "folder_kind",
    "format_of", "hub_offline", "is_repo_id", "load_state", "locate", "push", "read_config", "read_state",
    "read_tensors", "recover_folder", "render_model_card", "resolve", "sha256_file", "split_repo_ref",
    "write_artifact", "write_folder_atomic", "write_model_card", "write_state",
]
