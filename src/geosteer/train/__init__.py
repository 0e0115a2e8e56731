"""One training loop for any trainable intervention on a frozen model (accelerate-ready).

>>> from geosteer.train import TrainConfig, train
>>> result = train(model, bank, TrainConfig(lr=2e-2, tokens=300_000), tok=tok, out_dir="runs/x")

Any other objective goes through the same loop as a loss function ``loss(model, batch) -> (loss, logged)``:
``fit(model, trainable, cfg, data, loss=..., options=RunConfig(...))``.
"""

from geosteer.train.config import RunConfig, TrainConfig
from geosteer.train.data import BatchOrder, FullBatch, StepBatch, WindowBatches, load_texts, token_stream, windows
from geosteer.train.loop import (
    TrainingDiverged,
    TrainResult,
    fit,
    heldout_perplexity,
    train,
    trainable_parameters,
)
from geosteer.train.objective import LossFn, PromptObjective, PromptSets, lm_loss

__all__ = ["BatchOrder", "FullBatch", "LossFn", "PromptObjective", "PromptSets", "RunConfig", "StepBatch",
           "TrainConfig", "TrainResult", "TrainingDiverged", "WindowBatches", "fit", "heldout_perplexity", "lm_loss",
           "load_texts", "token_stream", "train", "trainable_parameters", "windows"]
