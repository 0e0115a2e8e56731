"""Every file geosteer reads back goes through the bounded reader (:mod:`geosteer.readers`: a regular file, size
and nesting caps, UTF-8 text, no lone surrogates): no other module calls ``json.load``, ``Path.read_text`` /
``read_bytes`` or ``open`` for reading, except the few listed here with the reason they are safe."""

from __future__ import annotations

import ast
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TREES = ("src/geosteer", "paper/src/geosteer_paper")

# (file, a piece of the call's source) -> why it may read directly
ALLOWED = {
    ("src/geosteer/readers.py", ""): "the bounded reader itself",
    ("src/geosteer/io_utils.py", "/proc/self/status"): "the kernel's status file",
    ("src/geosteer/kernels/ext.py", "CSRC"): "the package's own C++ sources",
    ("src/geosteer/studio/routes.py", "STATIC"): "the package's own page",
    ("src/geosteer/studio/routes.py", "files[name]"): "the package's own static files",
    ("src/geosteer/bench/concepts.py", "path.read_text"): "a package resource (the bundled concepts)",
    ("src/geosteer/manifold/cli_import.py", "card.read_text"): "the card this command has just written",
    ("src/geosteer/outputs.py", "open(p, 'rb')"): "fsync of a file this process has just written",
    ("src/geosteer/eval/textfile.py", "open(path, 'rb')"): "streams a file checked to be a regular file first",
    ("src/geosteer/eval/textfile.py", "path.read_text"): "a file checked to be a regular file first",
    ("src/geosteer/artifacts/state.py", "open(path, 'rb')"): "hashes a tensor file of an artifact folder it wrote",
    ("src/geosteer/manifold/importer.py", "open(path, 'rb')"): "a safetensors header, after a size check",
    ("src/geosteer/models/loading.py", ""): "the model cache's own marker and GGUF magic bytes",
    ("src/geosteer/models/bundled.py", ""): "the model packages' own chunks",
    ("src/geosteer/bench/decide_report.py", ""): "run files the CLI has verified (sealed) before the report",
    ("paper/src/geosteer_paper/reproduction/items.py", "p.read_text"): "the package's shipped item files",
}
RESOURCE_HINTS = ("resources.", "joinpath", "_corpus_file()", "files(")


def _calls(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        src = ast.unparse(node)
        if isinstance(f, ast.Attribute) and f.attr in ("read_text", "read_bytes"):
            yield node.lineno, src
        elif isinstance(f, ast.Attribute) and f.attr == "load" and ast.unparse(f.value) == "json":
            yield node.lineno, src
        elif isinstance(f, ast.Name) and f.id == "open":
            mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"),
                                                                  None)
            text = ast.literal_eval(mode) if isinstance(mode, ast.Constant) else "r"
            if "r" in text:
                yield node.lineno, src


def test_no_module_reads_a_file_around_the_bounded_reader():
    found = []
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for line, src in _calls(path):
                if any(h in src for h in RESOURCE_HINTS):
                    continue
                if any(f == rel and piece in src for f, piece in ALLOWED):
                    continue
                found.append(f"{rel}:{line}: {src[:100]}")
    assert not found, "read through geosteer.readers instead:\n" + "\n".join(found)


def _hostile(path: Path, kind: str) -> None:
    import os

    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    else:
        path.write_text("[" * 100_000 + "]" * 100_000)


@pytest.mark.parametrize("kind", ["fifo", "zero", "deep"])
def test_read_back_files_are_one_line_without_hanging(tmp_path, monkeypatch, capsys, kind):
    from geosteer.bench.decide_folder import read_sealed
    from geosteer.errors import GeosteerError
    from geosteer.manifold.method import edit_list
    from geosteer.outputs import folder_kind
    from geosteer.readers import ReadRefused
    from geosteer.tasks.lm_eval_glue import load_jsonl
    from geosteer.train.data import load_texts
    from tests.cli_helpers import one_line_exit_2, run_cli

    needle = {"fifo": "FIFO", "zero": "a device", "deep": "nested deeper"}[kind]
    _hostile(tmp_path / "art" / "config.json", kind)
    t0 = time.monotonic()
    code, _, err = run_cli(monkeypatch, capsys, "show", str(tmp_path / "art"))
    one_line_exit_2(code, err)
    assert folder_kind(tmp_path / "art") is None
    calls = [(load_jsonl, ReadRefused), (edit_list, GeosteerError)]
    if kind != "deep":  # a text file: its nesting is not JSON's
        calls.append((load_texts, GeosteerError))
    for i, (read, error) in enumerate(calls):
        p = tmp_path / f"{i}.json"
        _hostile(p, kind)
        with pytest.raises(error, match=needle):
            read(str(p))
    _hostile(tmp_path / "unit.json", kind)
    with pytest.raises(GeosteerError, match=needle):  # a checkpoint that cannot be read is refused, not read
        read_sealed(tmp_path / "unit.json")
    assert time.monotonic() - t0 < 30


@pytest.mark.parametrize("kind", ["fifo", "zero", "deep"])
def test_a_model_folders_declared_base_is_read_bounded(tmp_path, kind):
    from geosteer.models.identity import declared_bases

    _hostile(tmp_path / "m" / "config.json", kind)
    _hostile(tmp_path / "m" / "README.md", "fifo" if kind == "deep" else kind)
    t0 = time.monotonic()
    assert declared_bases(str(tmp_path / "m")) == []
    assert time.monotonic() - t0 < 10
