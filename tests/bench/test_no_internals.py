"""The benchmark reaches the methods only through their public faces: no module under ``geosteer.bench`` imports
a method package's internals.

A method package's public face is the package itself (``geosteer.<method>``: the names its ``__init__`` binds)
and the registry that serves every method (``geosteer.methods``, ``geosteer.recipe``, ``geosteer.load``). An
import of ``geosteer.<method>.<module>`` (``import``, ``from … import``, ``importlib.import_module`` with a
literal name, at any depth), or ``from geosteer.<method> import <module>`` for a module the face does not bind,
is an internal import. The method packages are :data:`geosteer.methods.BUILTIN`.

:data:`ALLOWED` lists the internal imports that remain, each with why; an entry that is no longer needed fails
the test too, so the list only shrinks.
"""

from __future__ import annotations

import ast
from pathlib import Path

from geosteer.methods import BUILTIN

SRC = Path(__file__).resolve().parents[2] / "src"
BENCH = SRC / "geosteer" / "bench"

#: (bench module, internal module) -> why it is still imported. Each wants the method's package face to export
#: what the bench calls (the method packages belong to their methods' owners).
ALLOWED: dict[tuple[str, str], str] = {}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _face_names(package: str) -> set[str]:
    """The names a package's ``__init__`` binds (imports, assignments, definitions)."""
    init = SRC.joinpath(*package.split(".")) / "__init__.py"
    names: set[str] = set()
    for node in ast.walk(ast.parse(init.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _is_submodule(package: str, name: str) -> bool:
    folder = SRC.joinpath(*package.split("."))
    return (folder / f"{name}.py").is_file() or (folder / name / "__init__.py").is_file()


def _package_of(module: str) -> str | None:
    return next((p for p in BUILTIN if module == p or module.startswith(p + ".")), None)


def internal_imports(source: str, module: str = "geosteer.bench.x") -> set[str]:
    """The internal modules of method packages that ``source`` (a module's text) imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None))
              == "import_module" and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            targets = [node.args[0].value]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            pkg = _package_of(node.module)
            if pkg == node.module:  # from the face: a submodule the face does not bind is internal
                face = _face_names(pkg)
                found.update(f"{pkg}.{a.name}" for a in node.names
                             if a.name not in face and _is_submodule(pkg, a.name))
                continue
            targets = [node.module]
        for t in targets:
            pkg = _package_of(t)
            if pkg is not None and t != pkg:
                found.add(t)
    return found


def bench_violations() -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for f in sorted(BENCH.rglob("*.py")):
        m = _module_name(f)
        for t in internal_imports(f.read_text(encoding="utf-8"), m):
            out[(m, t)] = 1
    return out


def test_the_bench_imports_no_method_internals():
    found = set(bench_violations())
    new = sorted(found - set(ALLOWED))
    assert not new, ("bench modules import method internals; import from the package face (geosteer.<method>) "
                     "or the registry instead: " + "; ".join(f"{m} -> {t}" for m, t in new))
    stale = sorted(set(ALLOWED) - found)
    assert not stale, f"no longer imported, remove from ALLOWED: {stale}"


def test_the_rule_sees_every_form_of_an_internal_import():
    assert internal_imports("from geosteer.manifold.low_rank_train import factorise") == {
        "geosteer.manifold.low_rank_train"}
    assert internal_imports("import geosteer.loreft.intervention") == {"geosteer.loreft.intervention"}
    assert internal_imports("def f():\n    from geosteer.vectors.apply import SteeringVectors") == {
        "geosteer.vectors.apply"}
    assert internal_imports("import importlib\nimportlib.import_module('geosteer.dynamics.gates')") == {
        "geosteer.dynamics.gates"}
    assert internal_imports("from geosteer.manifold import low_rank_train") == {"geosteer.manifold.low_rank_train"}
    # the faces and the registry are public
    assert internal_imports("from geosteer.vectors import extract, TrainableVectors\nimport geosteer.loreft\n"
                            "from geosteer.loreft import LoReFT\nfrom geosteer.methods import save_artifact\n"
                            "from geosteer.recipe import InterventionSpec") == set()


def test_every_method_package_has_a_face():
    for pkg in BUILTIN:
        assert "METHOD" in _face_names(pkg), pkg
