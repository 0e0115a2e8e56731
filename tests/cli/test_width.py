"""Output read in a pipe (CI logs, files) fits 100 columns: the help, the study listing, a table of results."""

from __future__ import annotations

import subprocess
import sys

import pytest

WIDTH = 100


def _piped(*args: str) -> str:
    env = {"PATH": "/usr/bin:/bin", "GEOSTEER_PROGRESS": "0"}
    out = subprocess.run([sys.executable, "-m", "geosteer.cli", *args], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("args", [("--help",), ("bench", "decide", "--help"), ("study", "--list")])
def test_piped_output_fits_100_columns(args):
    if args[0] == "study":
        pytest.importorskip("geosteer_paper")
    text = _piped(*args)
    assert text.strip() and max(len(line) for line in text.splitlines()) <= WIDTH, args
