"""Greedy and seeded sampling generation (KV cache on), under whatever interventions are active."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch

from geosteer.errors import GeosteerError
from geosteer.models.loading import input_device
from geosteer.overflow import FiniteLogits, check_logits


@dataclass
class GenerationResult:
    prompt: str
    text: str  # the continuation only
    token_ids: list[int] = field(default_factory=list)  # continuation token ids
    greedy: bool = True
    seed: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def prompt_ids(tok, prompt: str, add_bos: bool | None = None) -> torch.Tensor:
    """``(1, n)`` token ids of ``prompt``. ``add_bos=None`` (default): as the tokenizer encodes it
    (``tok(prompt)["input_ids"]``, its own BOS convention, as vLLM and lm-eval's ``hf`` model do);
    ``True``: BOS first whatever the tokenizer does; ``False``: no special tokens."""
    if not prompt:
        raise GeosteerError("prompt is empty")
    if add_bos is None:
        return tok(prompt, return_tensors="pt").input_ids
    ids = tok(prompt, add_special_tokens=False, return_tensors="pt").input_ids
    bos = getattr(tok, "bos_token_id", None)
    if add_bos and bos is not None and ids[0, 0].item() != bos:
        ids = torch.cat([torch.tensor([[bos]]), ids], dim=1)
    return ids


class GenerationCapped(UserWarning):
    """``max_new_tokens`` was lowered to what fits in the model's context."""


def context_limit(model) -> int | None:
    """The model's number of positions (``max_position_embeddings``), or None when it has no limit."""
    n = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    return int(n) if isinstance(n, int) and n > 0 else None


def cap_new_tokens(model, n_prompt: int, max_new_tokens: int) -> tuple[int, str | None]:
    """``max_new_tokens`` capped so that prompt + continuation fit the model's positions, and a note when
    it was capped. Generating past the last position would run on positions the model never saw (HF only
    warns), so the cap is the documented behaviour; a prompt that already fills the context is refused."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise GeosteerError(f"max_new_tokens must be >= 1 (got {max_new_tokens})")
    limit = context_limit(model)
    if limit is None or n_prompt + max_new_tokens <= limit:
        return max_new_tokens, None
    room = limit - n_prompt
    if room < 1:
        raise GeosteerError(f"the prompt has {n_prompt} tokens and fills the model's context of {limit} "
                            "positions: nothing can be generated; shorten the prompt")
    return room, (f"max_new_tokens {max_new_tokens} capped at {room}: the model has {limit} positions and "
                  f"the prompt uses {n_prompt}")


def _capped(model, n_prompt: int, max_new_tokens: int) -> int:
    import warnings

    n, note = cap_new_tokens(model, n_prompt, max_new_tokens)
    if note:
        warnings.warn(note, GenerationCapped, stacklevel=3)
    return n


def check_temperature(temperature: float) -> None:
    """Sampling needs a finite temperature > 0 (T = 0 is greedy decoding: ask for greedy instead)."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not (
            math.isfinite(temperature) and temperature > 0):
        raise GeosteerError(f"temperature must be a finite number > 0 for sampling (got {temperature}); "
                            "use greedy decoding for T = 0")


@torch.no_grad()
def generate(
    model,
    tok,
    prompt: str,
    max_new_tokens: int = 50,
    greedy: bool = True,
    temperature: float = 1.0,
    top_k: int = 50,
    seed: int = 0,
    add_bos: bool | None = None,
) -> GenerationResult:
    """Continue ``prompt``. Sampling is reproducible: the seed fixes torch's RNG for this call only.

    ``max_new_tokens`` beyond the model's positions is capped (a :class:`GenerationCapped` warning).
    Non-finite logits (an overflowing intervention) are refused before a token is chosen.
    """
    from transformers import LogitsProcessorList

    if max_new_tokens < 1:
        raise GeosteerError(f"max_new_tokens must be >= 1 (got {max_new_tokens})")
    if not greedy:
        check_temperature(temperature)
    device = input_device(model)
    ids = prompt_ids(tok, prompt, add_bos).to(device)
    max_new_tokens = _capped(model, ids.shape[1], max_new_tokens)
    kwargs = dict(max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id, use_cache=True,
                  attention_mask=torch.ones_like(ids), logits_processor=LogitsProcessorList([FiniteLogits()]))
    if greedy:
        kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    else:
        kwargs.update(do_sample=True, temperature=temperature, top_k=top_k, top_p=None)
    with torch.random.fork_rng(devices=[] if device.type == "cpu" else [device]):
        torch.manual_seed(seed)
        out = model.generate(ids, **kwargs)
    new = out[0, ids.shape[1]:].tolist()
    return GenerationResult(prompt=prompt, text=tok.decode(new, skip_special_tokens=True), token_ids=new,
                            greedy=greedy, seed=None if greedy else seed)


def _eos_ids(model, tok) -> set[int]:
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        eos = getattr(tok, "eos_token_id", None)
    return set() if eos is None else ({int(eos)} if isinstance(eos, int) else {int(e) for e in eos})


@torch.no_grad()
def greedy_with_draft(model, tok, ids: torch.Tensor, max_new_tokens: int,
                      draft: list[int] | None = None) -> tuple[list[int], torch.Tensor]:
    """Greedy continuation of ``ids`` (1, L) that first verifies a guessed continuation ``draft`` in one pass.

    The longest prefix of the draft greedy decoding would produce is accepted (plus the next token), then
    decoding goes on with the KV cache cropped: plain greedy tokens, fewer steps when the draft is right.
    Returns (new token ids, logits of the first new token).
    """
    max_new_tokens = _capped(model, ids.shape[1], max_new_tokens)  # >= 1, within the model's positions
    eos = _eos_ids(model, tok)
    device = ids.device
    draft = [int(t) for t in (draft or [])][: max_new_tokens - 1]
    L = ids.shape[1]
    seq = torch.cat([ids, torch.tensor([draft], dtype=ids.dtype, device=device)], 1) if draft else ids
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    cache.activate_past_recording()  # sliding-window layers keep what a crop needs
    out = model(input_ids=seq, attention_mask=torch.ones_like(seq), use_cache=True, cache=cache)
    logits = out.logits[0, L - 1:]
    check_logits(logits)
    first = logits[0].clone()
    pred = logits.argmax(-1).tolist()  # len(draft) + 1 greedy choices
    k = 0
    while k < len(draft) and pred[k] == draft[k] and draft[k] not in eos:
        k += 1
    new = draft[:k] + [pred[k]]
    if new[-1] in eos or len(new) >= max_new_tokens:
        return new[:max_new_tokens], first
    if len(draft) > k:
        cache.crop(-(len(draft) - k))
    while len(new) < max_new_tokens and new[-1] not in eos:
        step = torch.tensor([[new[-1]]], dtype=ids.dtype, device=device)
        total = L + len(new)
        o = model(input_ids=step, cache=cache, use_cache=True,
                  attention_mask=torch.ones(1, total, dtype=ids.dtype, device=device))
        check_logits(o.logits[0, -1])
        new.append(int(o.logits[0, -1].argmax()))
    return new, first


def _sample_token(logits: torch.Tensor, temperature: float, top_k: int, gen: torch.Generator) -> int:
    """One draw from softmax(logits / T) restricted to the top-k logits, with the row's own generator."""
    z = logits.float() / temperature
    if 0 < top_k < z.numel():
        kth = torch.topk(z, top_k).values[-1]
        z = z.masked_fill(z < kth, float("-inf"))
    return int(torch.multinomial(torch.softmax(z, -1), 1, generator=gen))


@torch.no_grad()
def generate_seeds(model, tok, prompt: str, seeds, max_new_tokens: int = 50, temperature: float = 1.0,
                   top_k: int = 50, add_bos: bool | None = None) -> list[GenerationResult]:
    """Seeded samples of ``prompt``, one per seed, decoded together as one batch (KV cache).

    Row i draws with its own generator seeded by ``seeds[i]``, so a seed gives the same continuation alone
    or in any batch, with or without an intervention (paired). Rows stop after an EOS token.
    """
    if max_new_tokens < 1:
        raise GeosteerError(f"max_new_tokens must be >= 1 (got {max_new_tokens})")
    check_temperature(temperature)
    seeds = [int(s) for s in seeds]
    if not seeds:
        return []
    from transformers import DynamicCache

    device = input_device(model)
    ids = prompt_ids(tok, prompt, add_bos).to(device)
    max_new_tokens = _capped(model, ids.shape[1], max_new_tokens)
    n, L = len(seeds), ids.shape[1]
    gens = [torch.Generator(device="cpu").manual_seed(s) for s in seeds]
    eos = _eos_ids(model, tok)
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    cache = DynamicCache(config=model.config)
    x = ids.expand(n, L)
    logits = model(input_ids=x, attention_mask=torch.ones_like(x), use_cache=True, cache=cache).logits[:, -1]
    new: list[list[int]] = [[] for _ in range(n)]
    alive = [True] * n
    for step in range(max_new_tokens):
        check_logits(logits)
        nxt = []
        for i in range(n):
            if alive[i]:
                t = _sample_token(logits[i].cpu(), temperature, top_k, gens[i])
                new[i].append(t)
                alive[i] = t not in eos
                nxt.append(t)
            else:
                nxt.append(pad)  # finished rows idle; rows never attend to each other
        if step + 1 == max_new_tokens or not any(alive):
            break
        step_ids = torch.tensor(nxt, dtype=ids.dtype, device=device)[:, None]
        mask = torch.ones(n, L + step + 1, dtype=ids.dtype, device=device)
        logits = model(input_ids=step_ids, attention_mask=mask, use_cache=True, cache=cache).logits[:, -1]
    return [GenerationResult(prompt=prompt, text=tok.decode(t, skip_special_tokens=True), token_ids=t,
                             greedy=False, seed=s) for t, s in zip(new, seeds, strict=True)]
