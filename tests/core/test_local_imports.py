"""Imports sit at module top: at most a quarter of the internal imports of library modules (not the CLI)
are inside functions. What stays inside a function avoids an optional
extra, keeps a package face light, or is patched by a test on its source module."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "src" / "geosteer"
MAX_SHARE = 0.25


def _library(rel: Path) -> bool:
    p = rel.parts
    return not (p[0] in ("cli", "assets") or rel.name == "cli.py" or rel.name.startswith("cli_"))


def _internal_imports(tree: ast.AST) -> tuple[int, int]:
    """(at module level, inside functions) imports of geosteer modules in ``tree``."""
    inside: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inside.update(id(n) for n in ast.walk(fn))
    top = local = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = ["geosteer"] if node.level else [node.module or ""]
        else:
            continue
        if any(n == "geosteer" or n.startswith("geosteer.") for n in names):
            local, top = (local + 1, top) if id(node) in inside else (local, top + 1)
    return top, local


def test_the_counter_tells_top_from_function_imports():
    src = "import geosteer.a\nfrom geosteer.b import c\nimport os\ndef f():\n    from geosteer.d import e\n"
    assert _internal_imports(ast.parse(src)) == (2, 1)


def test_most_internal_imports_are_at_module_top():
    top = local = 0
    for f in PKG.rglob("*.py"):
        if _library(f.relative_to(PKG)):
            t, loc = _internal_imports(ast.parse(f.read_text(encoding="utf-8")))
            top, local = top + t, local + loc
    share = local / (top + local)
    assert share <= MAX_SHARE, f"{share:.1%} of internal imports are inside functions (at most {MAX_SHARE:.0%})"
