"""Shared inputs of the benchmark tests: a small concept file and a budget sized for the tiny models."""

from __future__ import annotations

import json

import pytest

from geosteer.bench.design import Budget

CATS = {"name": "cats", "direction": "promote", "description": "cats",
        "positive": ["The cat purred on the warm windowsill.", "Cats chase mice and sleep all day.",
                     "My kitten loves to play with yarn.", "A cat's whiskers help it sense the world.",
                     "The tabby cat meowed for food.", "Cats groom their fur with rough tongues."],
        "negative": ["The stock market fell sharply today.", "Rain is expected over the weekend.",
                     "The bridge was built in 1920.", "He drove the truck to the city.",
                     "Parliament passed the new budget.", "The recipe needs two cups of flour."],
        "prompts": ["Tell me about your day.", "What should I cook tonight?", "Describe the city.",
                    "Write a sentence."]}

# two lever texts a side of six words, two training steps (a setup without a training rule)
TINY = Budget(train_texts=2, train_words=6, steps=2)


@pytest.fixture
def concept_file(tmp_path):
    path = tmp_path / "concepts.json"
    path.write_text(json.dumps([CATS]))
    return path
