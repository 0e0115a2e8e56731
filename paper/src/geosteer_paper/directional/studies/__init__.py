"""The directional method's paper studies, run as ``geosteer study directional <name>``."""
