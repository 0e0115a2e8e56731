"""Steering vectors: one direction per layer from contrastive prompts, added at a hook point.

    sv = extract(model, tok, pairs, layers="3-5", point="resid_post", method="mean_diff")  # CAA / DiffMean
    with geosteer.steer(model, sv.with_(scale=4)): ...
"""

from geosteer.vectors.apply import SteeringVectors, steer_tensor
from geosteer.vectors.artifact import VECTORS, export_gguf, import_gguf, load_vectors, push_vectors, save_vectors
from geosteer.vectors.config import METHODS, MODES, PHASES, POINTS, ApplyConfig, ExtractConfig
from geosteer.vectors.extract import AGGREGATORS, collect_activations, extract
from geosteer.vectors.method import METHOD
from geosteer.vectors.trained import TrainableVectors

__all__ = ["AGGREGATORS", "METHOD", "METHODS", "MODES", "PHASES", "POINTS", "VECTORS", "ApplyConfig",
           "ExtractConfig", "SteeringVectors", "TrainableVectors", "collect_activations", "export_gguf", "extract",
           "import_gguf", "load_vectors", "push_vectors", "save_vectors", "steer_tensor"]
