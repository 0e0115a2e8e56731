"""geosteer: geometric steering and analysis of pretrained language models."""

from geosteer.errors import GeosteerError
from geosteer.interventions import steer  # the function; the module is geosteer.interventions
from geosteer.methods import load  # any artifact folder or Hub repo id -> its object
from geosteer.models.anatomy import Anatomy, anatomy
from geosteer.models.loading import load_model
from geosteer.version import __version__

__all__ = ["Anatomy", "GeosteerError", "anatomy", "load", "load_model", "steer", "__version__"]
