"""Artifacts: the one reader and writer of geosteer's artifact folders (PEFT-style).

A folder holds ``geosteer_config.json`` (``format``, integer ``version``, ``files``), a ``*.safetensors``
file and a model card. Methods declare an :class:`ArtifactFormat` and their state (:mod:`.state`); this
package checks configs (:mod:`.config`), describes (:mod:`.describe`), writes cards (:mod:`.card`), reads and
pushes through the Hub (:mod:`.hub`) and writes atomically (:func:`write_folder_atomic`). Loading never
writes. The format table is :func:`geosteer.methods.load_artifact`'s.
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
