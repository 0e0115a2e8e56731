"""User-facing errors: the CLI prints these as one line and exits non-zero (no traceback)."""

from __future__ import annotations

import errno
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn


class GeosteerError(Exception):
    """A problem with the user's input or environment, with a message that says what is valid."""


class UnsupportedArchitecture(GeosteerError):
    pass


class ModelNotAvailable(GeosteerError):
    pass


class ArtifactError(GeosteerError):
    pass


class OutputRefused(FileExistsError, ArtifactError):
    """An output path that exists and may not be replaced (a folder with the user's own files, another
    kind of artifact): nothing is written and nothing is removed. The CLI exits 2, the studio answers 409."""


class LayerSpecError(GeosteerError, ValueError):
    """A layer list that is empty, repeats a layer, or names one the model does not have."""


class DiskFull(GeosteerError):
    """A write that ran out of disk space (or quota): what was there is kept, nothing half-written is left;
    the message names the path and the space needed. The CLI exits 2, the studio answers 507."""


_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_FULL_TEXT = ("no space left on device", "disk quota exceeded", "os error 28)", "os error 122)")


def is_disk_full(e: BaseException) -> bool:
    """Whether ``e`` (or an error it was raised from) is a full disk or quota: ``OSError`` ENOSPC/EDQUOT, or
    a library's wrapped I/O error that says so (safetensors: ``... (os error 28)``)."""
    seen = 0
    cur: BaseException | None = e
    while cur is not None and seen < 8:
        if isinstance(cur, DiskFull):
            return True
        if isinstance(cur, OSError) and cur.errno in _FULL_ERRNOS:
            return True
        if any(t in str(cur).lower() for t in _FULL_TEXT):
            return True
        cur, seen = cur.__cause__ or cur.__context__, seen + 1
    return False


def disk_full_line(e: BaseException) -> str:
    """The one line for a full disk that no writer named (:class:`DiskFull` says more)."""
    if isinstance(e, DiskFull):
        return str(e)
    name = getattr(e, "filename", None)
    where = f" writing {name}" if name else ""
    return (f"no space left on device{where}; nothing half-written was left and existing files were kept: "
            "free some space (or write somewhere else) and run again")


@contextmanager
def one_line_errors() -> Iterator[None]:
    """For scripts (``paper/studies/``): a user error (:class:`GeosteerError`, ``ValueError``) inside the block is
    printed as one line ``error: …`` on stderr and ends the program with exit status 2 (no traceback), as the
    ``geosteer`` command does."""
    try:
        yield
    except (GeosteerError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    except Exception as e:
        if not is_disk_full(e):
            raise
        print(f"error: {disk_full_line(e)}", file=sys.stderr)
        raise SystemExit(2) from None


def one_line_usage(parser: Any) -> Any:
    """``parser`` (an ``argparse.ArgumentParser``) with its usage errors (an unknown flag, a value of the wrong
    type, a missing argument) printed as one line ``error: …`` ending in where to see the valid options, exit
    status 2, as :func:`one_line_errors` prints a script's own errors."""

    def error(message: str) -> NoReturn:
        print(f"error: {message} (valid options: {parser.prog} --help)", file=sys.stderr)
        raise SystemExit(2)

    parser.error = error
    return parser
