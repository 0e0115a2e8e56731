"""Trainable steering vectors (``geosteer.vectors.TrainableVectors``): zero is the stock model, gradients reach
the vectors, and the trained vectors become ordinary steering vectors (the same logits at scale 1, the stock
model at scale 0) that save, load and apply through the recipe."""

from __future__ import annotations

import torch

import geosteer
from geosteer.interventions import steer
from geosteer.recipe import InterventionSpec
from geosteer.vectors import SteeringVectors, TrainableVectors

IDS = torch.tensor([[1, 45, 230, 87, 12, 600, 33, 9]])


def _logits(model, *ivs):
    with torch.no_grad(), steer(model, *ivs):
        return model(input_ids=IDS).logits


def test_zero_is_stock_and_gradients_reach_the_vectors(tiny_model):
    model, _ = tiny_model("llama")
    tv = TrainableVectors.for_model(model, [1, 2])
    torch.testing.assert_close(_logits(model, tv), _logits(model), atol=0, rtol=0)
    with steer(model, tv):
        model(input_ids=IDS).logits.float().pow(2).mean().backward()
    assert tv.vectors.grad is not None and bool((tv.vectors.grad.abs().sum(-1) > 0).all())


def test_the_trained_vectors_are_steering_vectors(tiny_model, tmp_path):
    model, _ = tiny_model("llama")
    tv = TrainableVectors.for_model(model, [1])
    with torch.no_grad():
        tv.vectors.normal_(0, 1.0, generator=torch.Generator().manual_seed(0))
    sv = tv.to_vectors(model, {"objective": "test"})
    assert isinstance(sv, SteeringVectors) and sv.extraction["method"] == "trained"
    torch.testing.assert_close(_logits(model, sv), _logits(model, tv), atol=1e-6, rtol=0)
    folder = sv.save(tmp_path / "v")
    back = geosteer.load(folder, model=model)
    torch.testing.assert_close(_logits(model, back), _logits(model, tv), atol=1e-6, rtol=0)
    half = InterventionSpec(vectors=str(folder), vector_scale=0.5)
    with torch.no_grad():
        tv.vectors.mul_(0.5)
    torch.testing.assert_close(_logits(model, half), _logits(model, tv), atol=1e-6, rtol=0)
    assert torch.equal(_logits(model, InterventionSpec(vectors=str(folder), vector_scale=0.0)), _logits(model))
