"""User-facing errors: the CLI prints these as one line and exits non-zero (no traceback)."""

from __future__ import annotations


class GeosteerError(Exception):
    """A problem with the user's input or environment, with a message that says what is valid."""


class UnsupportedArchitecture(GeosteerError):
    pass


class ModelNotAvailable(GeosteerError):
    pass


class ArtifactError(GeosteerError):
    pass


class LayerSpecError(GeosteerError, ValueError):
    """A layer list that is empty, repeats a layer, or names one the model does not have."""
