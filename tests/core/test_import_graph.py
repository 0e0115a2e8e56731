"""The package's import graph: no cycles (imports at any depth count, also those inside functions and
``importlib.import_module("geosteer...")`` calls with a literal name); the kernels a core layer under the
attention function, the methods and serving; and the
library below the figures: only ``viz`` itself and its users (CLI modules, the
studio, the demo app) import ``geosteer.viz``; the library never imports the paper package (``geosteer_paper``:
the studies, checks and reproduction report) or the vLLM plugin (``geosteer_vllm``), which have no cycles
either."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PKG = "geosteer"
PAPER_SRC = Path(__file__).resolve().parents[2] / "paper" / "src"
PAPER = "geosteer_paper"
PLUGIN_SRC = Path(__file__).resolve().parents[2] / "vllm-plugin" / "src"
PLUGIN = "geosteer_vllm"


def _modules(src: Path = SRC, pkg: str = PKG) -> dict[str, Path]:
    mods = {}
    for f in (src / pkg).rglob("*.py"):
        parts = list(f.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = f
    return mods


def import_graph(mods: dict[str, Path], pkg: str = PKG) -> dict[str, set[str]]:
    """Module -> the modules of ``pkg`` it imports. An import of a package is an edge to its ``__init__``;
    ``from pkg.mod import name`` where ``pkg.mod.name`` is a module is an edge to that module."""
    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        is_pkg = f.name == "__init__.py"
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif _import_module_call(node):
                targets = [node.args[0].value]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = m.split(".") if is_pkg else m.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    src = ".".join(base + ([node.module] if node.module else []))
                else:
                    src = node.module or ""
                targets = [f"{src}.{a.name}" if f"{src}.{a.name}" in mods else src for a in node.names]
            else:
                continue
            for t in targets:
                r = resolve(t) if t.split(".")[0] == pkg else None
                if r and r != m:
                    edges[m].add(r)
    return edges


def _import_module_call(node: ast.AST) -> bool:
    """``importlib.import_module("geosteer.x")`` or ``import_module("geosteer.x")`` with a literal name."""
    if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)):
        return False
    f = node.func
    return (isinstance(f, ast.Attribute) and f.attr == "import_module") or (isinstance(f, ast.Name)
                                                                          and f.id == "import_module")


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_cycle_finder_finds_cycles():
    """The checker itself: a two-module and a three-module cycle are found, a chain and a self-loop are not."""
    found = cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c", "f"}, "f": set(), "g": {"g"}})
    assert sorted(found) == [["a", "b"], ["c", "d", "e"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_the_graph_sees_imports_inside_functions(tmp_path):
    mods = {"geosteer.x": tmp_path / "x.py", "geosteer.y": tmp_path / "y.py"}
    mods["geosteer.x"].write_text("def f():\n    from geosteer.y import g\n")
    mods["geosteer.y"].write_text("import geosteer.x\n")
    assert cycles(import_graph(mods)) == [["geosteer.x", "geosteer.y"]]


def test_no_import_cycles():
    found = cycles(import_graph(_modules()))
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_no_import_cycles_in_the_paper_package_and_the_vllm_plugin():
    for src, pkg, face in ((PAPER_SRC, PAPER, "cli"), (PLUGIN_SRC, PLUGIN, "plugin")):
        mods = _modules(src, pkg)
        assert f"{pkg}.{face}" in mods
        found = cycles(import_graph(mods, pkg))
        assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def _names(node: ast.AST, pkg: str) -> bool:
    """An import of ``pkg``, or a string naming one of its modules (``"geosteer_paper.x:fn"``)."""
    if isinstance(node, ast.Import):
        return any(a.name.split(".")[0] == pkg for a in node.names)
    if isinstance(node, ast.ImportFrom):
        return (node.module or "").split(".")[0] == pkg
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(pkg + ".")


def test_the_library_never_imports_the_paper_package_or_the_vllm_plugin():
    """The rule between them: geosteer_paper and geosteer_vllm import geosteer, never the reverse (not even by a
    module-path string); the library finds ``geosteer study`` and ``geosteer serve`` through the
    ``geosteer.cli`` entry-point group only."""
    for pkg in (PAPER, PLUGIN):
        bad = sorted(m for m, f in _modules().items()
                     if any(_names(n, pkg) for n in ast.walk(ast.parse(f.read_text(encoding="utf-8")))))
        assert not bad, f"library modules that name {pkg}: {', '.join(bad)}"
    assert _names(ast.parse("from geosteer_paper.registry import studies").body[0], PAPER)
    assert _names(ast.Constant("geosteer_vllm.router.RecipeRouter"), PLUGIN)
    assert not _names(ast.Constant("geosteer_vllm_x.y"), PLUGIN)


KERNEL_DEPS = ("geosteer.kernels", "geosteer.errors", "geosteer.extras", "geosteer.cache")


def _reachable(edges: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for t in edges[todo.pop()] - seen:
            seen.add(t)
            todo.append(t)
    return seen


def test_kernels_are_a_layer_below_attention_methods_and_serving():
    """``geosteer.kernels`` reaches (at any depth) only itself and the core utilities; ``attention``, the
    surfaces and serving import it."""
    edges = import_graph(_modules())
    kernels = [m for m in edges if m == "geosteer.kernels" or m.startswith("geosteer.kernels.")]
    assert "geosteer.kernels.exact" in kernels
    bad = {m: sorted(t for t in _reachable(edges, m) if not t.startswith(KERNEL_DEPS)) for m in kernels}
    bad = {m: ts for m, ts in bad.items() if ts}
    assert not bad, "kernel modules that reach above their layer: " + "; ".join(f"{m} -> {', '.join(ts)}"
                                                                             for m, ts in sorted(bad.items()))
    assert "geosteer.kernels.triton" in edges["geosteer.attention"]
    assert "geosteer.kernels.exact" in edges["geosteer.manifold.surface_attention"]


def _viz_user(module: str) -> bool:
    last = module.rsplit(".", 1)[-1]
    return (module.startswith(("geosteer.viz", "geosteer.studio", "geosteer.cli")) or last == "cli"
            or last.startswith("cli_") or module == "geosteer.demo")


def test_only_viz_users_import_viz():
    edges = import_graph(_modules())
    bad = sorted(m for m, targets in edges.items()
                 if not _viz_user(m) and any(t.startswith("geosteer.viz") for t in targets))
    assert not bad, f"library modules that import geosteer.viz: {', '.join(bad)}"
    assert "geosteer.manifold.bank" in edges and not any(t.startswith("geosteer.viz")
                                                          for t in edges["geosteer.manifold.bank"])
    assert _viz_user("geosteer.manifold.cli_explore") and not _viz_user("geosteer.manifold.explore")


def test_the_graph_sees_importlib_strings(tmp_path):
    mods = {"geosteer.x": tmp_path / "x.py", "geosteer.y": tmp_path / "y.py"}
    mods["geosteer.x"].write_text("import importlib\ndef f():\n    return importlib.import_module('geosteer.y')\n")
    mods["geosteer.y"].write_text("from geosteer import x\n")
    assert cycles(import_graph(mods)) == [["geosteer.x", "geosteer.y"]]


def test_no_study_package_inside_the_library():
    """The laboratory lives in the paper package: no ``studies`` or ``reproduction`` package under
    ``src/geosteer``."""
    src = Path(__file__).resolve().parents[2] / "src" / "geosteer"
    found = sorted(str(p.relative_to(src)) for p in src.rglob("*")
                   if p.is_dir() and p.name in ("studies", "reproduction"))
    assert not found, f"study packages inside the library: {found}"


def test_the_vllm_plugin_reads_methods_only_through_the_served_protocol():
    """``geosteer_vllm`` imports no method package (not even by a module-path string): what a method serves
    it declares through ``served_ops`` (``geosteer.served``), so a new method changes nothing in the plugin."""
    from geosteer.methods import BUILTIN

    methods = tuple(BUILTIN)
    bad = sorted(f"{m} -> {t}" for m, f in _modules(PLUGIN_SRC, PLUGIN).items()
                 for n in ast.walk(ast.parse(f.read_text(encoding="utf-8")))
                 for t in _imported_names(n) if t in methods or t.startswith(tuple(p + "." for p in methods)))
    assert not bad, "plugin modules that import a method: " + "; ".join(bad)
    assert "geosteer.manifold" in methods and "geosteer.directional" in methods


def _imported_names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        return [node.module or ""]
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("geosteer."):
        return [node.value.split(":")[0]]
    return []
