"""geosteer: geometric steering and analysis of pretrained language models."""

from geosteer import threads as _threads  # first: the command's OpenMP wait is chosen before torch loads

if _threads.is_geosteer_command():
    _threads.prefer_passive_wait()

from geosteer.errors import GeosteerError
from geosteer.interventions import steer  # the function; the module is geosteer.interventions
from geosteer.methods import load  # any artifact folder or Hub repo id -> its object
from geosteer.models.anatomy import Anatomy, anatomy
from geosteer.models.loading import load_model
from geosteer.version import __version__

__all__ = ["Anatomy", "GeosteerError", "anatomy", "load", "load_model", "steer", "__version__"]
