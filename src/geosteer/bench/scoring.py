"""The readings the steering benchmark's scores are made of, for whatever is attached to the model.

- greedy continuations of formatted prompts (:func:`continue_prompts`, BOS first, cut at an end token);
- a text's mean log-prob per token read on its own (:func:`text_logprob`) and the share of its repeated 4-grams
  (:func:`repeated_ngram_share`);
- **fluency** f = min(1, exp(ℓ − ℓ₀)) · (1 − repeated-4-gram share), ℓ₀ being the same log-prob of the reference's
  continuation of that prompt; an empty continuation scores f = 0 (:func:`fluency_values`);
- the next-token log-probs after each prompt (:func:`next_token_logprobs`) and their KL against a reference
  (:func:`kl_rows`): the control KL.

How ``bench decide`` combines them with its judges is :mod:`geosteer.bench.decide_score`; ``bench text`` reads
them on everyday prompts (:mod:`geosteer.bench.text_quality`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


def repeated_ngram_share(ids: list[int], n: int = 4) -> float:
    """Share of the n-grams of ``ids`` that occurred earlier in ``ids`` (0 with fewer than n + 1 tokens)."""
    grams = [tuple(ids[i:i + n]) for i in range(len(ids) - n + 1)]
    if len(grams) < 2:
        return 0.0
    seen, rep = set(), 0
    for g in grams:
        rep += g in seen
        seen.add(g)
    return rep / len(grams)


@dataclass
class Continuations:
    texts: list[str]
    ids: list[list[int]]


def _bos_rows(tok, prompts: list[str]) -> list[list[int]]:
    from geosteer.eval.generation import prompt_ids

    return [prompt_ids(tok, p, True)[0].tolist() for p in prompts]


def _pad_id(tok) -> int:
    return int(tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0))


@torch.no_grad()
def continue_prompts(model, tok, prompts: list[str], new_tokens: int) -> Continuations:
    """Greedy continuations of formatted prompts (BOS first), with whatever is attached to ``model``: one
    left-padded batch (with its attention mask, HF ``generate``), each row cut at its first end token."""
    from transformers import LogitsProcessorList

    from geosteer.models.loading import input_device
    from geosteer.overflow import FiniteLogits

    eos = getattr(model.generation_config, "eos_token_id", None)
    eos = {tok.eos_token_id} | ({eos} if isinstance(eos, int) else set(eos or []))
    rows, pad = _bos_rows(tok, prompts), _pad_id(tok)
    L = max(len(r) for r in rows)
    ids = torch.tensor([[pad] * (L - len(r)) + r for r in rows], device=input_device(model))
    mask = torch.tensor([[0] * (L - len(r)) + [1] * len(r) for r in rows], device=ids.device)
    out = model.generate(ids, attention_mask=mask, max_new_tokens=new_tokens, do_sample=False, temperature=None,
                         top_p=None, top_k=None, pad_token_id=pad, use_cache=True,
                         logits_processor=LogitsProcessorList([FiniteLogits()]))
    texts, kept = [], []
    for row in out[:, L:].tolist():
        cut = next((i for i, t in enumerate(row) if t in eos), len(row))
        kept.append(row[:cut])
        texts.append(tok.decode(row[:cut], skip_special_tokens=True).strip())
    return Continuations(texts, kept)


def _right_padded(rows: list[list[int]], pad: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    L = max(len(r) for r in rows)
    ids = torch.tensor([r + [pad] * (L - len(r)) for r in rows], device=device)
    return ids, torch.tensor([len(r) for r in rows], device=device)


@torch.no_grad()
def text_logprob(model, tok, ids: list[list[int]]) -> np.ndarray:
    """Mean log-prob per token of each id list read on its own (BOS first), by ``model`` as it is; nan for
    an empty list. One right-padded batch (causal: the real positions never see the pads)."""
    from geosteer.models.loading import input_device

    bos = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    out = np.full(len(ids), np.nan)
    todo = [i for i, seq in enumerate(ids) if seq]
    if not todo:
        return out
    x, lengths = _right_padded([[bos, *ids[i]] for i in todo], _pad_id(tok), input_device(model))
    logp = torch.log_softmax(model(input_ids=x, use_cache=False).logits[:, :-1].float(), -1)
    tok_lp = logp.gather(-1, x[:, 1:, None])[..., 0]
    valid = torch.arange(x.shape[1] - 1, device=x.device)[None] < (lengths - 1)[:, None]
    means = (tok_lp * valid).sum(-1) / valid.sum(-1)
    out[todo] = means.double().cpu().numpy()
    return out


@torch.no_grad()
def next_token_logprobs(model, tok, prompts: list[str]) -> torch.Tensor:
    """(n, V) next-token log-probs after each formatted prompt (BOS first; one right-padded batch, each row
    read at its last real position)."""
    from geosteer.models.loading import input_device

    x, lengths = _right_padded(_bos_rows(tok, prompts), _pad_id(tok), input_device(model))
    logits = model(input_ids=x, use_cache=False).logits
    last = logits[torch.arange(x.shape[0], device=x.device), lengths - 1].float()
    return torch.log_softmax(last, -1).cpu()


def kl_rows(ref: torch.Tensor, other: torch.Tensor) -> np.ndarray:
    """KL(P_ref ‖ P_other) per row of two (n, V) log-prob tensors."""
    return (ref.exp() * (ref - other)).sum(-1).clamp_min(0).double().numpy()


def fluency_values(logprob: np.ndarray, ref_logprob: np.ndarray, repeated: np.ndarray) -> np.ndarray:
    """f = min(1, exp(ℓ − ℓ₀)) · (1 − repeated) per item; 0 where ℓ is nan (an empty continuation), no
    log-prob penalty where ℓ₀ is nan (the stock model said nothing)."""
    logprob, ref_logprob = np.asarray(logprob, np.float64), np.asarray(ref_logprob, np.float64)
    ref_lp = np.where(np.isnan(ref_logprob), logprob, ref_logprob)
    gap = np.nan_to_num(logprob - ref_lp, nan=0.0)
    f = np.minimum(1.0, np.exp(np.minimum(gap, 0.0))) * (1.0 - np.asarray(repeated, np.float64))
    return np.where(np.isnan(logprob), 0.0, f)
