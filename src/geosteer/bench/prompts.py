"""Prompts of the steering benchmark: one formatting for every lever, the training pairs, the neutral sets.

Every prompt (concept prompts, training prompts, neutral control prompts) goes through
:func:`format_prompt`: the tokenizer's chat template when the run is a chat run (``bench decide``'s is; an
instruction becomes the system prompt), the plain text otherwise (an instruction becomes a line before
it). The formatted text never starts with the BOS token: every encoding puts it in front once (BOS first,
as :mod:`geosteer.train.prompts` encodes).
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

TRAIN_PROMPTS_FILE = "bench_train_prompts.json"  # generic requests the trained levers learn after
CONTROL_FILES = ("wall_learn/elements_control_train.json", "wall_learn/elements_control_heldout.json")


def format_prompt(tok, prompt: str, chat: bool, instruction: str | None = None) -> str:
    """``prompt`` as the model sees it (module docstring)."""
    if chat:
        from geosteer.eval.chat import format_prompt as chat_format

        return chat_format(tok, prompt, True, instruction, add_bos=True)  # every encoding puts BOS first
    text = f"{instruction}\n\n{prompt}" if instruction else prompt
    bos = getattr(tok, "bos_token", None)
    if bos and text.startswith(bos):
        text = text[len(bos):]
    return text


def _prompt_file(name: str) -> list:
    return json.loads(resources.files("geosteer.data").joinpath("prompts", name).read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def train_prompts() -> tuple[str, ...]:
    """Generic requests (unrelated to any concept) that the trained levers' target texts follow."""
    return tuple(_prompt_file(TRAIN_PROMPTS_FILE))


@lru_cache(maxsize=1)
def neutral_prompts() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(training controls, evaluation controls): neutral factual prompts, disjoint."""
    a, b = (tuple(_prompt_file(f)) for f in CONTROL_FILES)
    return a, b


def cut_words(text: str, words: int) -> str:
    """The first ``words`` words of ``text``."""
    parts = text.split()
    return " ".join(parts[:words])


def training_texts(setup, texts: list[str]) -> list[str]:
    """The lever texts a lever learns from: at most the budget's count, each cut to its word count."""
    b = setup.budget
    return [cut_words(t, b.train_words) for t in texts[: b.train_texts]]


def training_pairs(setup, texts: list[str]) -> list[dict]:
    """``{"prompt", "target"}`` pairs: each lever text as the answer to a generic request (the requests
    taken in turn), the request formatted as every prompt is."""
    prompts = setup.train_prompts
    sep = "" if setup.chat else " "
    return [{"prompt": prompts[i % len(prompts)], "target": sep + t}
            for i, t in enumerate(training_texts(setup, texts))]
