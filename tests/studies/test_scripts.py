"""Every study script under studies/ that takes options (argparse) answers ``--help`` (exit 0, usage text)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p for p in (ROOT / "studies").rglob("*.py") if "argparse" in p.read_text(encoding="utf-8"))


def test_the_moved_runners_are_found():
    names = {p.relative_to(ROOT).as_posix() for p in SCRIPTS}
    assert {"studies/manifold/steering.py", "studies/directional/compression.py"} <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.relative_to(ROOT).as_posix() for p in SCRIPTS])
def test_help_runs(script):
    p = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, cwd=ROOT,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("usage:")


@pytest.mark.parametrize("args", [
    ["studies/manifold/protocol_table.py", "--surfaces", "nope.json", "--lora", "nope2.json", "--out", "x.json"],
    ["docs/results/tasks/paired_mc.py", "nope_a", "nope_b", "--task", "t", "--out", "x.json"],
])
def test_missing_inputs_are_one_line_exit_2(args, tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / args[0]), *args[1:]], capture_output=True, text=True,
                       cwd=tmp_path, timeout=300)
    assert p.returncode == 2 and p.stderr.startswith("error: ") and p.stderr.count("\n") == 1, p.stderr
    assert not (tmp_path / "x.json").exists()
