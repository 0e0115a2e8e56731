"""Chat prompts: a user message (and an optional system prompt) through the tokenizer's chat template."""

from __future__ import annotations

from geosteer.errors import GeosteerError
from geosteer.train.prompts import bos_first


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


def check_chat_options(chat: bool, system: str | None) -> None:
    """``--system`` only with ``--chat``, and not empty (one line, before any model loads)."""
    if system is not None and not chat:
        raise GeosteerError("--system is the chat template's system prompt: give --chat with it")
    if system is not None and not system.strip():
        raise GeosteerError("--system is empty; give the system prompt's text or leave it out")


def format_prompt(tok, prompt: str, chat: bool, system: str | None = None, add_bos: bool | None = None) -> str:
    """``prompt`` as the model reads it: through the chat template with ``chat`` (a user message after the
    optional ``system`` prompt, ending where the assistant's reply starts), else unchanged. ``add_bos`` is
    how the caller encodes the text (:func:`geosteer.train.prompts.bos_first`: None as the tokenizer does,
    True BOS first, False never); where that encoding puts the BOS first, a BOS the template writes at the
    start is left out, so the encoded prompt holds exactly one."""
    if not chat:
        return prompt

    text = chat_prompt(tok, prompt, system)
    bos = getattr(tok, "bos_token", None)
    if bos and text.startswith(bos) and bos_first(tok, add_bos):
        text = text[len(bos):]
    return text


def format_prompts(tok, prompts: list[str], chat: bool, system: str | None = None,
                   add_bos: bool | None = None) -> list[str]:
    """:func:`format_prompt` of each prompt."""
    return [format_prompt(tok, p, chat, system, add_bos) for p in prompts]


def format_targets(tok, targets: list[dict] | None, chat: bool, system: str | None = None,
                   add_bos: bool | None = None) -> list[dict] | None:
    """``{"prompt", "target"}`` items with each prompt through :func:`format_prompt` (the target, the reply,
    unchanged); None stays None."""
    if targets is None:
        return None
    return [{**t, "prompt": format_prompt(tok, t["prompt"], chat, system, add_bos)} for t in targets]
