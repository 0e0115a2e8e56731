"""Output options checked while the command line is parsed, before any model loads.

Every option naming something a verb writes takes one of these callbacks (:func:`geosteer.io_utils.check_output_path`,
:func:`geosteer.outputs.check_output_folder`); a test walks every verb.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import typer

from geosteer.io_utils import check_output_path
from geosteer.outputs import check_output_folder

OUTPUT_FLAGS = ("--out", "--csv", "--save", "--png", "--figure", "--html", "--out-dir")
RECORDS = (".json", ".csv")
HTML = (".html", ".htm")


def _callback(check: Callable[[Path, str], object]) -> Callable:
    def callback(ctx: typer.Context, param: typer.CallbackParam, value):
        if value is None or ctx.resilient_parsing:
            return value
        flag = max(param.opts, key=len) if param.opts else f"--{param.name}"
        check(Path(value), flag)
        return value

    callback.geosteer_output_check = True  # what the walk-every-verb test looks for
    return callback


def out_file(*suffixes: str) -> Callable:
    """A file output with one of ``suffixes`` (e.g. ``".json", ".csv"``; none given: any name)."""
    return _callback(lambda p, flag: check_output_path(p, what=flag, suffixes=suffixes or None))


def out_records() -> Callable:
    """Tidy records: ``.json`` (rows + meta) or ``.csv`` (rows)."""
    return out_file(*RECORDS)


def out_dir() -> Callable:
    """A folder that files are written into (created if missing; not under a file, writable)."""
    return _callback(lambda p, flag: check_output_path(p, what=flag, folder=True))


def out_artifact(kind: str) -> Callable:
    """An artifact folder of ``kind`` (e.g. ``geosteer-surfaces``): written where missing or empty, or
    over an artifact of the same kind; a folder with anything else in it is refused."""
    return _callback(lambda p, flag: check_output_folder(p, kind, what=flag))


def out_trained_artifact(kind: str) -> Callable:
    """:func:`out_artifact` for a verb that keeps its run state in ``<out>.train/``: that name must be a
    folder or nothing (a file there is refused now, not after training)."""
    def check(p: Path, flag: str) -> None:
        from geosteer.train.checkpoint import check_state_folder

        check_output_folder(p, kind, what=flag)
        check_state_folder(Path(str(p) + ".train"))

    return _callback(check)
