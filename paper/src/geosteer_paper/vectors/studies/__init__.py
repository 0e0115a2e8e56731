"""The steering-vector paper studies, run as ``geosteer study vectors <name>``."""
