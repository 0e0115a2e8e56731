"""One studio page per study result file (the report's figures), from read-only result folders.

A page is addressed as ``/results/<root index>/<path inside that root>``; the path is resolved and must
stay inside its root (no ``..``, no absolute paths, no symlinks out), and only ``.json``/``.csv`` files
are served.
"""

from __future__ import annotations

import logging
from html import escape
from pathlib import Path

try:
    from fastapi import HTTPException
except ModuleNotFoundError as _e:  # without the optional extra: one line naming it
    from geosteer.extras import missing

    raise missing(_e) from None

from geosteer.errors import GeosteerError
from geosteer.formats import CONFIG_NAME

SUFFIXES = (".json", ".csv")
MAX_FILES = 500
MAX_BYTES = 64 << 20  # a larger result file is neither listed nor read
#: What a result file's content can make a reader raise: a page answers 422 with one line, never a 500.
READ_ERRORS = (GeosteerError, ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError, OSError)
log = logging.getLogger("geosteer.studio")


def readable(p: Path) -> bool:
    """A regular result file of at most :data:`MAX_BYTES` that the report reader opens (anything its content
    makes the reader raise means: not listed)."""
    from geosteer.viz.results import is_result_file

    try:
        if not p.is_file() or p.stat().st_size > MAX_BYTES:
            return False
        return is_result_file(p)
    except READ_ERRORS as e:
        log.warning("studio: result file %s not listed (%s)", p, type(e).__name__)
        return False


def _why(e: BaseException, p: Path, rel: str) -> str:
    """One line on why a result file cannot be read: the reader's own message for a user error, else what
    kind of content it is."""
    if isinstance(e, RecursionError):
        return "nested too deeply"
    if isinstance(e, (GeosteerError, ValueError, OSError)) and str(e).strip():
        return str(e).replace(str(p), rel).strip().splitlines()[0][:200]
    return f"its content is not what a result file holds ({type(e).__name__})"


class ResultPages:
    def __init__(self, roots: list[Path]):
        self.roots = [Path(r).resolve() for r in roots]

    def list(self) -> list[dict]:
        """The result files under the roots that the report reader can open (others are not listed)."""
        out = []
        for i, root in enumerate(self.roots):
            if not root.is_dir():
                continue
            for p in sorted(root.rglob("*")):
                if p.suffix.lower() in SUFFIXES and p.is_file() and self._inside(p.resolve(), root) \
                        and not (p.parent / CONFIG_NAME).is_file() and readable(p):
                    rel = p.relative_to(root).as_posix()
                    out.append({"id": f"{i}/{rel}", "name": p.name, "folder": root.name,
                                "label": f"{root.name}/{rel}"})
                    if len(out) >= MAX_FILES:
                        return out
        return out

    @staticmethod
    def _inside(p: Path, root: Path) -> bool:
        return p == root or root in p.parents

    def resolve(self, rel: str) -> Path:
        head, _, rest = rel.partition("/")
        if not head.isdigit() or int(head) >= len(self.roots) or not rest:
            raise HTTPException(404, f"no result file '{rel}'")
        root = self.roots[int(head)]
        if rest.startswith("/") or "\\" in rest or any(part in ("..", "") for part in rest.split("/")):
            raise HTTPException(400, "invalid result path: plain relative names only, no '..'")
        p = (root / rest).resolve()
        if not self._inside(p, root):
            raise HTTPException(400, "invalid result path: outside the results folder")
        if p.suffix.lower() not in SUFFIXES or not p.is_file():
            raise HTTPException(404, f"no result file '{rel}' (.json/.csv only)")
        if p.stat().st_size > MAX_BYTES:
            raise HTTPException(422, f"result file '{rel}' is larger than {MAX_BYTES >> 20} MiB")
        return p

    def index_html(self) -> str:
        items = "".join(f"<li><a href='/results/{escape(r['id'], quote=True)}'>{escape(r['label'])}</a></li>"
                        for r in self.list()) or "<li>no result files</li>"
        return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>results</title></head><body>"
                f"<p><a href='/'>← studio</a></p><h1>study results</h1><ul>{items}</ul></body></html>")

    def page_html(self, rel: str) -> str:
        from geosteer.viz.report import render_html, sections_for

        p = self.resolve(rel)
        try:
            sections = sections_for([p], follow_links=False)
        except HTTPException:
            raise
        except READ_ERRORS as e:
            log.warning("studio: result file %s cannot be shown (%s: %s)", p, type(e).__name__, e)
            raise HTTPException(422, f"result file '{rel}' cannot be shown: {_why(e, p, rel)}") from None
        html = render_html(sections, title=p.name, inline_js=False, js_src="/static/plotly.js")
        return html.replace("<body>", "<body><p><a href='/'>← studio</a> · <a href='/results'>all results</a>"
                            "</p>", 1)
