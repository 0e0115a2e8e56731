"""The levers' building blocks: a lever saved as its method's artifact is that artifact at one strength, builds
sharing a work folder keep their own artifacts, a lever does not depend on what was built before it, walls leave
the model as it was (the matched levers' neutrality: test_matched; LoReFT's formula: tests/loreft)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from geosteer.bench import matched
from geosteer.bench.concepts import read_concepts
from geosteer.bench.prompts import format_prompt, neutral_prompts, train_prompts
from geosteer.bench.registry import Setup
from geosteer.interventions import steer
from tests.bench.conftest import TINY

IDS = torch.tensor([[1, 45, 230, 87, 12, 600, 33, 9]])


def _logits(model, ivs=()):
    with torch.no_grad(), steer(model, *ivs):
        return model(input_ids=IDS).logits


def _setup(model, tok, concept_file, tmp_path) -> Setup:
    """A setup of the concept file's first concept on a tiny model: three lever texts a side, the TINY budget."""
    c = read_concepts(concept_file)[0]
    toward, away = (c.positive, c.negative) if c.direction == "promote" else (c.negative, c.positive)
    return Setup(model=model, tok=tok, concept=c, toward=list(toward[:3]), away=list(away[:3]),
                 train_prompts=[format_prompt(tok, p, False) for p in train_prompts()[:2]],
                 train_controls=list(neutral_prompts()[0][:2]), budget=TINY, chat=False, seed=0, work=tmp_path)


@pytest.mark.parametrize(("name", "key", "strength_key"), [("vector", "vectors", "vector_scale"),
                                                          ("loreft", "loreft", "loreft_strength")])
def test_learned_levers_are_their_methods_artifacts_at_one_strength(tiny_model, concept_file, tmp_path, name, key,
                                                                     strength_key):
    """The vector and LoReFT levers are saved as their methods' artifacts; each point is the recipe of that
    artifact at the point's strength (s = 1: the object as trained, loaded with ``geosteer.load``)."""
    import geosteer
    from geosteer.recipe import InterventionSpec

    model, tok = tiny_model("llama")
    built = matched.build(name, _setup(model, tok, concept_file, tmp_path), lr=0.05)
    try:
        for s in (0.0, 0.5, 1.0):
            with built.at(s).interventions() as ivs:
                (spec,) = ivs
            assert isinstance(spec, InterventionSpec) and getattr(spec, strength_key) == s
        trained = geosteer.load(getattr(spec, key), model=model)
        with built.at(1.0).interventions() as ivs:
            torch.testing.assert_close(_logits(model, ivs), _logits(model, [trained]), atol=0, rtol=0)
    finally:
        built.cleanup()


def test_builds_of_one_lever_sharing_a_work_folder_keep_their_own_artifacts(tiny_model, concept_file, tmp_path):
    """Builds at other rates or seeds share the work folder (also in parallel processes): each keeps its own
    artifact, and its cleanup removes only that."""
    model, tok = tiny_model("llama")
    s = _setup(model, tok, concept_file, tmp_path)
    a, b = matched.build("vector", s, lr=0.05), matched.build("vector", s, lr=0.5)
    with a.at(1.0).interventions() as ia, b.at(1.0).interventions() as ib:
        (sa,), (sb,) = ia, ib
        assert sa.vectors != sb.vectors
        assert (_logits(model, ia) - _logits(model, ib)).abs().max() > 1e-6
    a.cleanup()
    assert not Path(sa.vectors).exists() and Path(sb.vectors).is_dir()
    b.cleanup()
    assert not Path(sb.vectors).exists()


def test_a_lever_does_not_depend_on_what_ran_before_it(tiny_model, concept_file, tmp_path):
    """A resumed run builds a lever without the levers before it (LoRA's adapters are drawn at random): the
    lever is the one an uninterrupted run builds."""
    model, tok = tiny_model("llama")
    s = _setup(model, tok, concept_file, tmp_path)

    def lora_logits(noise: int) -> torch.Tensor:
        torch.manual_seed(noise)
        torch.rand(noise)  # another global random state each time
        built = matched.build("lora", s, lr=0.05)
        try:
            with built.at(1.0).interventions() as ivs:
                return _logits(model, ivs)
        finally:
            built.cleanup()

    torch.testing.assert_close(lora_logits(3), lora_logits(11), atol=0, rtol=0)


def test_walls_leave_the_model_as_it_was(tiny_model, tmp_path):
    """Walls (suppressed concepts only) give at most one point, the walls on; after cleanup the stock model."""
    import json

    from tests.bench.conftest import CATS

    path = tmp_path / "c.json"
    path.write_text(json.dumps([{**CATS, "direction": "suppress"}]))
    model, tok = tiny_model("llama")
    stock = _logits(model)
    built = matched.build("walls", _setup(model, tok, path, tmp_path))
    try:
        assert built.at is None and len(built.points) <= 1
        assert all(p.strength == 1.0 and p.params["walls"] >= 1 for p in built.points)
    finally:
        built.cleanup()
    torch.testing.assert_close(_logits(model), stock, atol=0, rtol=0)
