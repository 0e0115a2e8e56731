"""A recorder in place of ``huggingface_hub.HfApi`` for push tests: what would be uploaded lands in a folder."""

from __future__ import annotations

import shutil
from pathlib import Path


def fake_hf_api(calls: dict, uploaded: Path) -> type:
    """An ``HfApi`` stand-in that records token/repo/branch/revision in ``calls`` and copies the uploaded
    folder to ``uploaded``."""

    class FakeApi:
        def __init__(self, token=None):
            calls["token"] = token

        def create_repo(self, repo_id, private=True, exist_ok=False):
            calls["repo"] = (repo_id, private)
            return f"https://huggingface.co/{repo_id}"

        def create_branch(self, repo_id, branch, exist_ok=False):
            calls["branch"] = branch

        def upload_folder(self, repo_id, folder_path, revision=None, commit_message=None):
            calls["revision"] = revision
            shutil.copytree(folder_path, uploaded)

    return FakeApi
