"""Surfaces on the Hugging Face Hub: push a bank (saved with its model card) and load it back by repo id.

Loading needs nothing here: ``geosteer.manifold.load("org/name")`` (or ``"org/name@revision"``, or
``revision=``) reads the repo's snapshot through ``geosteer.artifacts.locate`` (huggingface_hub cache,
``HF_HUB_OFFLINE=1`` honoured).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from geosteer.artifacts import push
from geosteer.io_utils import atomic_write_text
from geosteer.manifold.artifact import save


def push_to_hub(bank, repo_id: str, *, private: bool = True, token: str | None = None,
                revision: str | None = None, commit_message: str | None = None, dtype: str = "float32",
                **meta) -> str:
    """Save ``bank`` (config, ``surfaces.safetensors``, model card) into a temporary folder and upload it to
    ``repo_id``; return the repo URL. ``meta`` is recorded as with ``geosteer.manifold.save``."""

    with tempfile.TemporaryDirectory(prefix="geosteer-push-") as tmp:
        folder = save(bank, Path(tmp) / "surfaces", dtype=dtype, **meta)
        return push(folder, repo_id, private=private, token=token, revision=revision,
                    commit_message=commit_message or "Upload geosteer attention-manifold surfaces")


def write_card(folder: str | Path) -> Path:
    """(Re)write the model card README.md of an existing surfaces artifact from its config (Hub metadata:
    ``library_name: geosteer``, the base model's Hub id, license; the training command and held-out
    perplexity recorded at training time). The tensors and config are left untouched."""
    from geosteer.manifold.artifact import _model_card, load, read_config, resolve

    folder = resolve(folder)
    doc = read_config(folder)
    bank = load(folder)
    text = _model_card(doc, bank)
    if text is None:
        from geosteer.errors import ArtifactError

        raise ArtifactError(f"could not render a model card for {folder}")
    return atomic_write_text(folder / "README.md", text)
