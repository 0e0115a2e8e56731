"""Shared pieces of the training-loop tests: a small trainable intervention, the tests' config, one run."""

from __future__ import annotations

import torch
from torch import nn

from geosteer.interventions import HookIntervention
from geosteer.train import TrainConfig, train


class LearnedBias(nn.Module):
    """A trainable steering vector on every layer's attention output (an intervention with parameters)."""

    def __init__(self, d_model: int, poison_after: int | None = None) -> None:
        super().__init__()
        self.vec = nn.Parameter(torch.zeros(d_model))
        self.calls = 0
        self.poison_after = poison_after

    def _fn(self, x, ctx):
        if ctx.layer == 0:
            self.calls += 1
        out = x + self.vec
        if self.poison_after is not None and self.calls > self.poison_after:
            out = out * float("nan")
        return out

    def attach(self, model):
        return HookIntervention("attn_out", self._fn).attach(model)


def train_config(**kw) -> TrainConfig:
    """8 steps of 4 windows of 16 tokens, a checkpoint every 3 steps, no held-out eval; ``kw`` overrides."""
    d = dict(lr=5e-2, steps=8, batch_size=4, seq_len=16, checkpoint_every=3, log_every=100,
             eval_before_after=False)
    d.update(kw)
    return TrainConfig(**d)


def train_bias(tiny, stream, cfg: TrainConfig, **kw):
    """Train a fresh :class:`LearnedBias` on ``stream``; ``kw`` goes to ``train``. Returns (bias, result)."""
    model, tok = tiny
    bias = LearnedBias(model.config.hidden_size)
    res = train(model, bias, cfg, tok=tok, train_ids=stream, interventions=[bias], progress=False, log=None,
                **kw)
    return bias, res
