"""Chat prompts: a user message (and an optional system prompt) through the tokenizer's chat template."""

from __future__ import annotations

from geosteer.errors import GeosteerError


def has_chat_template(tok) -> bool:
    """Whether the tokenizer carries a chat template."""
    return bool(getattr(tok, "chat_template", None))


def chat_prompt(tok, user: str, system: str | None = None) -> str:
    """``user`` (and ``system``, when given) formatted by the tokenizer's chat template, ending where the
    assistant's reply starts (``add_generation_prompt``). Refused in one line when there is no template."""
    if not has_chat_template(tok):
        raise GeosteerError("--chat needs a tokenizer with a chat template; this model's tokenizer has none "
                            "(leave out --chat to continue plain text)")
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
    return tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
