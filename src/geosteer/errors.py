"""User-facing errors: the CLI prints these as one line and exits non-zero (no traceback)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager


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


@contextmanager
def one_line_errors() -> Iterator[None]:
    """For scripts (``studies/``): a user error (:class:`GeosteerError`, ``ValueError``) inside the block is
    printed as one line ``error: …`` on stderr and ends the program with exit status 2 (no traceback), as the
    ``geosteer`` command does."""
    try:
        yield
    except (GeosteerError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
