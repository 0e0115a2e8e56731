"""Every study script under paper/studies/ that takes options (argparse) answers ``--help`` (exit 0, usage text).

The scripts run as ``python SCRIPT --help`` would run them (``__main__``, the script's folder first on
``sys.path``), each in its own process: one child interpreter imports what they all import (torch, transformers,
geosteer) once, then forks a fresh copy of itself per script, so no script sees what another one imported.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPTS = sorted(p for p in (ROOT / "paper" / "studies").rglob("*.py") if "argparse" in p.read_text(encoding="utf-8"))

_HELP_IN_FORKS = r"""
import contextlib, io, json, os, runpy, sys, traceback
import torch, transformers, geosteer  # noqa: F401 - what every script imports, paid once before the forks

results = {}
for script in sys.argv[1:]:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: this script alone, as `python SCRIPT --help`
        os.close(r)
        out, err, code = io.StringIO(), io.StringIO(), 0
        sys.argv, sys.path[0] = [script, "--help"], os.path.dirname(script)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                runpy.run_path(script, run_name="__main__")
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) or e.code is None else 1
        except BaseException:
            err.write(traceback.format_exc())
            code = 1
        with os.fdopen(w, "w") as f:
            json.dump({"returncode": code or 0, "stdout": out.getvalue(), "stderr": err.getvalue()}, f)
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        results[script] = json.loads(f.read() or '{"returncode": -1, "stdout": "", "stderr": "child died"}')
    os.waitpid(pid, 0)
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def help_runs() -> dict:
    """script path -> {returncode, stdout, stderr} of ``SCRIPT --help``."""
    scripts = [str(p) for p in SCRIPTS]
    if not hasattr(os, "fork"):  # one interpreter per script
        return {s: vars(subprocess.run([sys.executable, s, "--help"], capture_output=True, text=True, cwd=ROOT,
                                       timeout=300)) for s in scripts}
    p = subprocess.run([sys.executable, "-c", _HELP_IN_FORKS, *scripts], capture_output=True, text=True, cwd=ROOT,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.splitlines()[-1])


def test_the_moved_runners_are_found():
    names = {p.relative_to(ROOT).as_posix() for p in SCRIPTS}
    assert {"paper/studies/manifold/steering.py", "paper/studies/directional/compression.py"} <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.relative_to(ROOT).as_posix() for p in SCRIPTS])
def test_help_runs(script, help_runs):
    p = help_runs[str(script)]
    assert p["returncode"] == 0, p["stderr"]
    assert p["stdout"].startswith("usage:")


@pytest.mark.parametrize("args", [
    ["paper/studies/manifold/protocol_table.py", "--surfaces", "nope.json", "--lora", "nope2.json", "--out", "x.json"],
    ["paper/studies/tasks/paired_mc.py", "nope_a", "nope_b", "--task", "t", "--out", "x.json"],
])
def test_missing_inputs_are_one_line_exit_2(args, tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / args[0]), *args[1:]], capture_output=True, text=True,
                       cwd=tmp_path, timeout=300)
    assert p.returncode == 2 and p.stderr.startswith("error: ") and p.stderr.count("\n") == 1, p.stderr
    assert not (tmp_path / "x.json").exists()
