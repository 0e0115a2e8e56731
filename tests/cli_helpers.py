"""Running the ``geosteer`` command inside a test: exit code and captured output, and the one-line error check."""

from __future__ import annotations

import sys


def run_cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """``geosteer ARGS`` through ``geosteer.cli.main`` → (exit code, stdout, stderr)."""
    from geosteer import cli

    monkeypatch.setattr(sys, "argv", ["geosteer", *args])
    code = 0
    try:
        cli.main()
    except SystemExit as e:
        code = e.code or 0
    out = capsys.readouterr()
    return code, out.out, out.err


def one_line_exit_2(code: int, err: str) -> None:
    """A user error: exit code 2 and exactly one ``error: …`` line, no traceback."""
    assert code == 2, err
    assert err.startswith("error: ") and "Traceback" not in err and len(err.strip().splitlines()) == 1
