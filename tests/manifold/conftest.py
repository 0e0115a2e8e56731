"""Fixtures of the surfaces training tests: a tiny GQA + sliding-window model and a short repeated text."""

from __future__ import annotations

import pytest

from geosteer import load_model

TEXT = ("The river flows through the valley and the village. The mill by the river grinds the grain. "
        "In spring the river floods the fields, and the farmers plant rice. ") * 40


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-qwen2")  # GQA + sliding window


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("txt") / "train.txt"
    p.write_text(TEXT)
    return p
