"""Greedy and seeded sampling generation (KV cache on), under whatever interventions are active."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from geosteer.errors import GeosteerError


@dataclass
class GenerationResult:
    prompt: str
    text: str  # the continuation only
    token_ids: list[int] = field(default_factory=list)  # continuation token ids
    greedy: bool = True
    seed: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def prompt_ids(tok, prompt: str, add_bos: bool = True) -> torch.Tensor:
    if not prompt:
        raise GeosteerError("prompt is empty")
    ids = tok(prompt, add_special_tokens=False, return_tensors="pt").input_ids
    bos = getattr(tok, "bos_token_id", None)
    if add_bos and bos is not None and ids[0, 0].item() != bos:
        ids = torch.cat([torch.tensor([[bos]]), ids], dim=1)
    return ids


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
    add_bos: bool = True,
) -> GenerationResult:
    """Continue ``prompt``. Sampling is reproducible: the seed fixes torch's RNG for this call only."""
    if max_new_tokens < 1:
        raise GeosteerError(f"max_new_tokens must be >= 1 (got {max_new_tokens})")
    if not greedy and temperature <= 0:
        raise GeosteerError(f"temperature must be > 0 (got {temperature}); use greedy decoding instead")
    device = next(model.parameters()).device
    ids = prompt_ids(tok, prompt, add_bos).to(device)
    kwargs = dict(max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id, use_cache=True,
                  attention_mask=torch.ones_like(ids))
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
    """Greedy continuation of ``ids`` (1, L) that first checks a guessed continuation ``draft`` in one pass.

    The prompt and the draft go through the model together (teacher forcing); the longest prefix of the
    draft that greedy decoding would have produced is accepted, plus the model's own next token, and
    decoding goes on step by step from there with the KV cache cropped to the accepted tokens (the
    verification step of speculative decoding, with a fixed draft). The tokens are those of plain greedy
    decoding (``model.generate(do_sample=False)``, stopping after an EOS token), up to floating-point near
    ties between a batched and a step-by-step pass, as for any KV-cache decoding. On CPU, decoding is bound
    by reading the weights once per step, so a draft that is right for k tokens saves about k steps: the
    studio passes the previous continuation after an edit. Returns (new token ids, logits of the first new
    token).
    """
    if max_new_tokens < 1:
        raise GeosteerError(f"max_new_tokens must be >= 1 (got {max_new_tokens})")
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
        new.append(int(o.logits[0, -1].argmax()))
    return new, first
