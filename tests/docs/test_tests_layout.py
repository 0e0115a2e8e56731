"""The tests mirror the code: every test module lives in tests/<folder>/, the folder named after the package of
src/geosteer it tests (tests/manifold/test_walls.py tests src/geosteer/manifold/walls.py), or one of the folders
for what is not a package: core (the modules at the top of src/geosteer), paper (the paper
package, paper/src/geosteer_paper, and its scripts, paper/studies), serve (the vLLM plugin,
vllm-plugin/src/geosteer_vllm), docs (docs, examples, packaging, this layout), e2e (a real browser)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
SRC = ROOT / "src" / "geosteer"
NOT_PACKAGES = {"core", "docs", "e2e", "paper", "serve"}
NO_INIT = {"e2e"}  # run by file path; its modules keep their own names


def _packages() -> set[str]:
    return {p.name for p in SRC.iterdir() if (p / "__init__.py").is_file()}


def _test_modules() -> list[Path]:
    return sorted(p for pattern in ("test_*.py", "*_test.py") for p in TESTS.rglob(pattern)
                  if "__pycache__" not in p.parts)


def _where_to(path: Path, folders: set[str]) -> str:
    """The folder a misplaced module probably belongs in: its name's first word if that is a folder."""
    words = path.stem.removeprefix("test_").split("_")
    for n in range(len(words), 0, -1):
        folder = "_".join(words[:n])
        if folder in folders:
            rest = "_".join(words[n:]) or folder
            return f"git mv {path.relative_to(ROOT)} tests/{folder}/test_{rest}.py"
    return f"git mv {path.relative_to(ROOT)} tests/<package>/{path.name}"


def test_every_test_module_is_in_a_package_folder():
    folders = _packages() | NOT_PACKAGES
    misplaced = [p for p in _test_modules() if len(p.relative_to(TESTS).parts) < 2
                 or p.relative_to(TESTS).parts[0] not in folders]
    assert not misplaced, (
        "test modules go under tests/<folder>/, the folder named after the src/geosteer package they test "
        f"({', '.join(sorted(_packages()))}) or one of {', '.join(sorted(NOT_PACKAGES))} (see the test guide, "
        "docs/testing.md):\n" + "\n".join(_where_to(p, folders) for p in misplaced))


def test_every_test_folder_is_a_python_package():
    """Two folders may then hold modules of the same name (tests/manifold/test_cli.py, tests/vectors/test_cli.py)."""
    folders = {p.relative_to(TESTS).parts[0] for p in _test_modules() if len(p.relative_to(TESTS).parts) > 1}
    missing = sorted(f for f in folders - NO_INIT if not (TESTS / f / "__init__.py").is_file())
    assert not missing, f"these test folders need an empty __init__.py: {missing}"


def test_the_suggestion_names_the_package_folder():
    folders = _packages() | NOT_PACKAGES
    assert _where_to(TESTS / "test_manifold_walls.py", folders) == \
        "git mv tests/test_manifold_walls.py tests/manifold/test_walls.py"
    assert _where_to(TESTS / "test_studio.py", folders) == "git mv tests/test_studio.py tests/studio/test_studio.py"
    assert _where_to(TESTS / "test_thing.py", folders) == "git mv tests/test_thing.py tests/<package>/test_thing.py"
