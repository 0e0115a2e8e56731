"""geosteer: geometric steering and analysis of pretrained language models."""

from geosteer.errors import GeosteerError
from geosteer.models.anatomy import Anatomy, anatomy
from geosteer.models.loading import load_model
from geosteer.steer import steer  # noqa: E402  (the function; the module stays importable)

__version__ = "0.1.0"

__all__ = ["Anatomy", "GeosteerError", "anatomy", "load_model", "steer", "__version__"]
