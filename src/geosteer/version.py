"""The installed distribution's version (pyproject.toml), readable without importing the package face."""

try:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as _version

    __version__ = _version("geosteer")
except PackageNotFoundError:  # pragma: no cover - a source tree on sys.path without an install
    __version__ = "0+unknown"
