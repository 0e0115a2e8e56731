"""The tokenizers vendored in ``geosteer/assets`` (cached per process: the tiny models share them).

Its own module so that ``models.loading`` (which builds tiny models) and ``models.tiny`` (which needs a
tokenizer) do not import each other.
"""

from __future__ import annotations

import functools
from pathlib import Path

ASSETS = Path(__file__).resolve().parent.parent / "assets"


@functools.lru_cache(maxsize=1)
def gpt2_tokenizer():
    """GPT-2's tokenizer from the vendored vocabulary (cached per process: tiny models share it)."""
    from transformers import GPT2Tokenizer

    tok = GPT2Tokenizer.from_pretrained(str(ASSETS / "gpt2_tokenizer"))
    tok.pad_token = tok.eos_token
    return tok


@functools.lru_cache(maxsize=1)
def smollm2_tokenizer():
    """SmolLM2's tokenizer from the vendored files (cached per process: tiny models share it)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(ASSETS / "smollm2_tokenizer"))


def adds_bos(tok) -> bool:
    """Whether ``tok(text)`` puts the tokenizer's BOS token first by itself: its own convention
    (``add_bos_token``; Llama-2 and Gemma tokenizers do, SmolLM2's and GPT-2's do not)."""
    bos = getattr(tok, "bos_token_id", None)
    if bos is None:
        return False
    ids = tok("a")["input_ids"]
    return len(ids) > len(tok("a", add_special_tokens=False)["input_ids"]) and ids[0] == bos
