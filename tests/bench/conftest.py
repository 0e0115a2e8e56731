"""Shared inputs of the benchmark tests: a small concept file and a budget sized for the tiny models."""

from __future__ import annotations

import json

import pytest

from geosteer.bench.budget import Budget

CATS = {"name": "cats", "direction": "promote", "description": "cats",
        "positive": ["The cat purred on the warm windowsill.", "Cats chase mice and sleep all day.",
                     "My kitten loves to play with yarn.", "A cat's whiskers help it sense the world.",
                     "The tabby cat meowed for food.", "Cats groom their fur with rough tongues."],
        "negative": ["The stock market fell sharply today.", "Rain is expected over the weekend.",
                     "The bridge was built in 1920.", "He drove the truck to the city.",
                     "Parliament passed the new budget.", "The recipe needs two cups of flour."],
        "prompts": ["Tell me about your day.", "What should I cook tonight?", "Describe the city.",
                    "Write a sentence."]}

# every lever measured at strength 0 and 1; two training steps; one prompt per split
TINY = Budget("tiny", validation_prompts=1, test_prompts=1, new_tokens=4, control_prompts=2, train_controls=2,
              train_texts=2, train_words=6, steps=2, strengths=(0.0, 1.0), caa_layers=(0.0, 1.0),
              caa_multipliers=(0.0, 2.0), bootstrap=50)


@pytest.fixture
def concept_file(tmp_path):
    path = tmp_path / "concepts.json"
    path.write_text(json.dumps([CATS]))
    return path
