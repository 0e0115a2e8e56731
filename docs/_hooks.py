"""mkdocs hooks (mkdocs.yml ``hooks:``): the README is the site's home page.

The README lives at the repository root and links into ``docs/`` (``docs/tasks.md``); the home page is
generated from it with those links made relative to the docs folder, so the README stays the one source
and GitHub and the site both resolve its links.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]


def readme_as_index(text: str) -> str:
    """README markdown with ``](docs/X)`` links rewritten to ``](X)`` (relative to docs/)."""
    return re.sub(r"\]\(docs/", "](", text)


def on_files(files: Files, config) -> Files:
    if files.get_file_from_path("index.md") is None:
        content = readme_as_index((ROOT / "README.md").read_text(encoding="utf-8"))
        files.append(File.generated(config, "index.md", content=content))
    return files
