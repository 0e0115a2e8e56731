"""What the study scripts under ``paper/studies/`` share: their entry point and the command line they record."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Sequence

from geosteer.errors import one_line_errors


def command_line(script: str, argv: Sequence[str] | None = None) -> str:
    """``python paper/studies/<script> ARGS``, the command a results file records (``argv`` None: the
    arguments this process was started with)."""
    return f"python paper/studies/{script} " + shlex.join(argv if argv is not None else sys.argv[1:])


def run_script(parser: argparse.ArgumentParser, run: Callable[[argparse.Namespace, Sequence[str] | None], None],
               argv: Sequence[str] | None = None) -> None:
    """Parse ``argv`` (None: this process's arguments) with ``parser``, then ``run(args, argv)`` with bad input
    reported in one line, exit 2 (:func:`geosteer.errors.one_line_errors`)."""
    a = parser.parse_args(argv)
    with one_line_errors():
        run(a, argv)
