"""mkdocs hooks (mkdocs.yml ``hooks:``): the README is the site's home page.

The README lives at the repository root and links into ``docs/`` (``docs/tasks.md``); the home page is
generated from it with those links made relative to the docs folder, so the README stays the one source
and GitHub and the site both resolve its links.

Docstrings use Sphinx roles (``:func:`geosteer.x```); markdown renders them as ``:func:`` before the code,
so the rendered pages drop the role (and show ``~a.b.C`` as ``C``, as Sphinx does).
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
_ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|exc|obj):<code>(~?)([^<]*)</code>")


def readme_as_index(text: str) -> str:
    """README markdown with ``](docs/X)`` links rewritten to ``](X)`` (relative to docs/)."""
    return re.sub(r"\]\(docs/", "](", text)


def on_files(files: Files, config) -> Files:
    if files.get_file_from_path("index.md") is None:
        content = readme_as_index((ROOT / "README.md").read_text(encoding="utf-8"))
        files.append(File.generated(config, "index.md", content=content))
    return files


def drop_sphinx_roles(html: str) -> str:
    """``:func:<code>a.b</code>`` -> ``<code>a.b</code>``; ``~a.b.C`` -> ``C``."""
    return _ROLE.sub(lambda m: f"<code>{m[2].rsplit('.', 1)[-1] if m[1] else m[2]}</code>", html)


def on_page_content(html: str, page, config, files) -> str:
    return drop_sphinx_roles(html)
