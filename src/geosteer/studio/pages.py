"""One studio page per study result file (the report's figures), from read-only result folders.

A page is addressed as ``/results/<root index>/<path inside that root>``; the path is resolved and must
stay inside its root (no ``..``, no absolute paths, no symlinks out), and only ``.json``/``.csv`` files
are served.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

try:
    from fastapi import HTTPException
except ModuleNotFoundError as _e:  # without the optional extra: one line naming it
    from geosteer.extras import missing

    raise missing(_e) from None

from geosteer.artifacts import CONFIG_NAME

SUFFIXES = (".json", ".csv")
MAX_FILES = 500


class ResultPages:
    def __init__(self, roots: list[Path]):
        self.roots = [Path(r).resolve() for r in roots]

    def list(self) -> list[dict]:
        """The result files under the roots that the report reader can open (others are not listed)."""
        from geosteer.viz.results import is_result_file

        out = []
        for i, root in enumerate(self.roots):
            if not root.is_dir():
                continue
            for p in sorted(root.rglob("*")):
                if p.suffix.lower() in SUFFIXES and p.is_file() and self._inside(p.resolve(), root) \
                        and not (p.parent / CONFIG_NAME).is_file() and is_result_file(p):
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
        return p

    def index_html(self) -> str:
        items = "".join(f"<li><a href='/results/{escape(r['id'], quote=True)}'>{escape(r['label'])}</a></li>"
                        for r in self.list()) or "<li>no result files</li>"
        return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>results</title></head><body>"
                f"<p><a href='/'>← studio</a></p><h1>study results</h1><ul>{items}</ul></body></html>")

    def page_html(self, rel: str) -> str:
        from geosteer.viz.report import render_html, sections_for

        p = self.resolve(rel)
        html = render_html(sections_for([p], follow_links=False), title=p.name, inline_js=False,
                           js_src="/static/plotly.js")
        return html.replace("<body>", "<body><p><a href='/'>← studio</a> · <a href='/results'>all results</a>"
                            "</p>", 1)
