"""Surfaces on the Hugging Face Hub: push a bank (saved with its model card) and load it back by repo id.

Loading needs nothing here: ``geosteer.manifold.load("org/name")`` (or ``"org/name@revision"``, or
``revision=``) reads the repo's snapshot through ``geosteer.artifacts.locate`` (huggingface_hub cache,
``HF_HUB_OFFLINE=1`` honoured).
"""

from __future__ import annotations

import tempfile
from pathlib import Path


def push_to_hub(bank, repo_id: str, *, private: bool = True, token: str | None = None,
                revision: str | None = None, commit_message: str | None = None, dtype: str = "float32",
                **meta) -> str:
    """Save ``bank`` (config, ``surfaces.safetensors``, model card) into a temporary folder and upload it to
    ``repo_id``; return the repo URL. ``meta`` is recorded as with ``geosteer.manifold.save``."""
    from geosteer.artifacts import push
    from geosteer.manifold.artifact import save

    with tempfile.TemporaryDirectory(prefix="geosteer-push-") as tmp:
        folder = save(bank, Path(tmp) / "surfaces", dtype=dtype, **meta)
        return push(folder, repo_id, private=private, token=token, revision=revision,
                    commit_message=commit_message or "Upload geosteer attention-manifold surfaces")
