"""geosteer: geometric steering and analysis of pretrained language models."""

from geosteer.errors import GeosteerError
from geosteer.interventions import steer  # the function; the module is geosteer.interventions
from geosteer.models.anatomy import Anatomy, anatomy
from geosteer.models.loading import load_model

try:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as _version

    __version__ = _version("geosteer")  # the installed distribution's version (pyproject.toml)
except PackageNotFoundError:  # pragma: no cover - a source tree on sys.path without an install
    __version__ = "0+unknown"

__all__ = ["Anatomy", "GeosteerError", "anatomy", "load_model", "steer", "__version__"]
