"""One training loop for any trainable intervention on a frozen model (accelerate-ready).

>>> from geosteer.train import TrainConfig, train
>>> result = train(model, bank, TrainConfig(lr=2e-2, tokens=300_000), tok=tok, out_dir="runs/x")
"""

from geosteer.train.config import TrainConfig
from geosteer.train.data import BatchOrder, load_texts, token_stream, windows
from geosteer.train.loop import TrainingDiverged, TrainResult, heldout_perplexity, train, trainable_parameters

__all__ = ["BatchOrder", "TrainConfig", "TrainResult", "TrainingDiverged", "heldout_perplexity", "load_texts",
           "token_stream", "train", "trainable_parameters", "windows"]
