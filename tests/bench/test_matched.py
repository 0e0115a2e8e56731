"""The matched levers of the decisive benchmark: each neutral at strength 0 (stock logits), moving the model at
strength 1, leaving it unchanged after cleanup; trainable parameter counts follow their formulas."""

from __future__ import annotations

import torch

from geosteer.bench import matched
from geosteer.bench.design import Design
from tests.bench.test_levers import _logits, _setup


def test_every_matched_lever_is_neutral_at_0_and_acts_at_1(tiny_model, concept_file, tmp_path):
    model, tok = tiny_model("llama")
    stock = _logits(model)
    s = _setup(model, tok, concept_file, tmp_path)
    cfg = model.config
    for name in (*matched.LEARNED, *matched.EXPLORATORY, "caa"):
        built = matched.build(name, s, lr=0.05)
        try:
            with built.at(0.0).interventions() as ivs:
                torch.testing.assert_close(_logits(model, ivs), stock, atol=2e-5, rtol=0, msg=name)
            with built.at(1.0).interventions() as ivs:
                assert (_logits(model, ivs) - stock).abs().max() > 1e-4, name
        finally:
            built.cleanup()
        torch.testing.assert_close(_logits(model), stock, atol=0, rtol=0, msg=f"{name} left the model changed")
        d, n = cfg.hidden_size, cfg.num_hidden_layers
        if name == "loreft":
            assert built.params == n * (2 * matched.REFT_RANK * d + matched.REFT_RANK)
        surfaces = n * cfg.num_attention_heads * (d // cfg.num_attention_heads)  # one per layer, head, dim
        k = matched.SURFACE_GRID + 3  # cubic B-spline control points per axis
        if name.startswith("surfaces"):
            rank = {"surfaces-rank1": 1, **matched.EXPLORATORY}[name]
            assert built.params == surfaces * (k * k if rank is None else 2 * rank * k), name
        if name == "lora":
            kv = cfg.num_key_value_heads * (d // cfg.num_attention_heads)
            assert built.params == n * matched.LORA_RANK * ((d + d) + (d + kv))


def test_the_design_budget_carries_its_sizes():
    d = Design()
    b = d.budget()
    assert (b.steps, b.train_texts, b.train_words) == (d.steps, d.train_texts, d.train_words)


def test_the_prompting_lever_asks_for_the_concept_or_forbids_it():
    from types import SimpleNamespace

    up = SimpleNamespace(name="golden_gate-bridge", direction="promote", description=None)
    down = SimpleNamespace(name="cats", direction="suppress", description="house cats")
    assert matched.instruction_for(up) == "Whatever you are asked, make your answer about golden gate bridge."
    assert matched.instruction_for(down) == "Whatever you are asked, do not mention house cats in your answer."
    s = SimpleNamespace(concept=down)
    (point,) = matched.build_prompting(s).points
    assert point.instruction == matched.instruction_for(down) and point.strength == 1.0
