"""The one layer-list parser and the CLI's shape (issue 12).

- ``models.anatomy.parse_layers`` is the only layer parser: every method's parser is that function, and
  every verb with a ``--layers`` option refuses a bad list with one line and exit code 2.
- No module under ``src/geosteer`` other than the CLI modules imports typer or ``geosteer.cli`` (the
  ``geosteer study`` commands are in the paper package).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import geosteer
from geosteer.errors import GeosteerError
from geosteer.models.anatomy import anatomy, parse_layers

SRC = Path(geosteer.__file__).resolve().parent


DYN, DIR = ("study", "dynamics"), ("study", "directional")  # the paper studies' spelling


@pytest.mark.parametrize("spec,needle", [
    ("5-3", "reversed layer range '5-3'"),
    ("3,3", "layer 3 given twice"),
    ("0-4,3", "layer 3 given twice"),
    ("40", "layer 40 out of range"),
    ("", "empty layer list"),
    ("a-b", "bad layer spec"),
    ("3-", "bad layer spec"),
    ("-1", "bad layer spec"),
    ([], "empty layer list"),
    ([1, 1], "layer 1 given twice"),
])
def test_parse_layers_refuses_with_valid_range(spec, needle):
    with pytest.raises(GeosteerError, match=needle) as e:
        parse_layers(spec, 30)
    msg = str(e.value)
    assert "\n" not in msg
    assert "0..29" in msg


@pytest.mark.parametrize("spec,expect", [
    ("8-15", list(range(8, 16))), ("0,2,5-7", [0, 2, 5, 6, 7]), ("7,0", [0, 7]), ("0-5;9", [0, 1, 2, 3, 4, 5, 9]),
    ("0-2 9", [0, 1, 2, 9]), (" 2 - 4 ", [2, 3, 4]), (3, [3]), ([2, 1], [1, 2]), ("29", [29]),
])
def test_parse_layers_accepts(spec, expect):
    assert parse_layers(spec, 30) == expect


@pytest.mark.parametrize("spec", [None, "all", " ALL "])
def test_parse_layers_all_is_none(spec):
    assert parse_layers(spec, 30) is None


def test_check_layers_refuses_empty_and_duplicates():
    import geosteer

    m, _ = geosteer.load_model("tiny-llama")
    an = anatomy(m)
    assert an.check_layers(None) == [0, 1, 2]
    assert an.check_layers([2, 0]) == [2, 0]  # order kept: callers may care
    for bad, needle in (([], "empty layer list"), ([1, 1], "given twice"), ([3], "out of range")):
        with pytest.raises(ValueError, match=needle):
            an.check_layers(bad)


def test_every_layer_parser_is_the_one_function():
    from geosteer import recipe
    from geosteer.directional import config as dconfig
    from geosteer.manifold import train as mtrain

    for mod in (dconfig, recipe, mtrain):
        assert mod.parse_layers is parse_layers, mod.__name__


def _run(argv, monkeypatch, capsys):
    from tests.cli_helpers import run_cli

    code, _, err = run_cli(monkeypatch, capsys, *argv)
    return code, err


@pytest.fixture(scope="module")
def surfaces(tmp_path_factory):
    import geosteer
    from geosteer.manifold import install, save

    m, _ = geosteer.load_model("tiny-llama")
    path = tmp_path_factory.mktemp("surf") / "s"
    save(install(m, grid_size=4), path)
    return path


LAYER_VERBS = [
    [*DYN, "ablate", "-m", "tiny-llama", "--tokens", "64", "--context", "32"],
    [*DYN, "gains", "-m", "tiny-llama", "--tokens", "64", "--context", "32"],
    ["learn", "gates", "-m", "tiny-llama", "--out", "{tmp}/g", "--tokens", "64"],
    [*DYN, "critical", "-m", "tiny-llama", "--tokens", "32", "--context", "16", "--steps", "1"],
    [*DYN, "commutator", "-m", "tiny-llama"],
    [*DYN, "pressure", "-m", "tiny-llama"],
    [*DYN, "split-options", "-m", "tiny-llama"],
    [*DYN, "edit-specificity", "-m", "tiny-llama"],
    ["measure", "decompose", "-m", "tiny-llama", "--tokens", "16", "--chunk", "16"],
    [*DIR, "diagonal", "-m", "tiny-llama", "--tokens", "16", "--out", "{tmp}/o.json"],
    [*DIR, "heads", "-m", "tiny-llama", "--texts", "1", "--text-len", "16", "--out", "{tmp}/o.json"],
    [*DIR, "strength", "-m", "tiny-llama", "--tokens", "16", "--out", "{tmp}/o.json"],
    [*DIR, "mlp-internal", "-m", "tiny-llama", "--texts", "1", "--text-len", "16", "--out", "{tmp}/o.json"],
    ["learn", "surfaces", "-m", "tiny-llama", "--out", "{tmp}/o", "--steps", "1"],
    ["measure", "explore", "-m", "tiny-llama", "--surfaces", "{surf}"],
]


@pytest.mark.parametrize("verb", LAYER_VERBS, ids=lambda v: " ".join(v[:2]))
@pytest.mark.parametrize("spec,needle", [("5-3", "reversed layer range"), ("1,1", "given twice"),
                                         ("40", "out of range"), ("", "empty layer list"),
                                         ("a-b", "bad layer spec"), ("3-", "bad layer spec")])
def test_every_layer_option_exits_2_with_one_line(verb, spec, needle, monkeypatch, capsys, tmp_path, surfaces):
    argv = [a.replace("{tmp}", str(tmp_path)).replace("{surf}", str(surfaces)) for a in verb]
    code, err = _run([*argv, "--layers", spec], monkeypatch, capsys)
    assert code == 2, err
    assert err.startswith("error: ") and needle in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    assert not (tmp_path / "o").exists() and not (tmp_path / "o.json").exists() and not (tmp_path / "g").exists()


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def is_cli_module(rel: Path) -> bool:
    """The CLI modules: the ``geosteer.cli`` package and each package's ``cli.py`` / ``cli_*.py`` (the study
    commands are in the paper package)."""
    return rel.parts[0] == "cli" or rel.name == "cli.py" or rel.name.startswith("cli_")


def test_only_cli_modules_import_typer_or_the_cli():
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        if is_cli_module(rel):
            continue
        bad = sorted(n for n in _imports(path) if n == "typer" or n.startswith("typer.")
                     or n == "geosteer.cli" or n.startswith("geosteer.cli."))
        if bad:
            offenders.append(f"{rel}: {', '.join(bad)}")
    assert not offenders, offenders
    assert is_cli_module(Path("manifold/cli.py")) and not is_cli_module(Path("manifold/train.py"))
    assert not is_cli_module(Path("dynamics/studies/geometry.py")) and not is_cli_module(Path("dynamics/geometry.py"))
    assert not is_cli_module(Path("studies/x.py"))


def test_help_texts_name_no_issue_numbers():
    import re

    from typer.main import get_command

    from geosteer.cli import app

    def walk(cmd, path=()):
        yield path, cmd
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, (*path, name))

    found = []
    for path, cmd in walk(get_command(app)):
        texts = [cmd.help or ""] + [getattr(p, "help", "") or "" for p in cmd.params]
        found += [f"{' '.join(path)}: {t}" for t in texts if re.search(r"\(issue \d+\)", t)]
    assert not found, found
