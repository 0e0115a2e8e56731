"""Strided sliding-window perplexity (the standard HF recipe), batched.

Windows of ``context`` tokens every ``stride``; each token after the first is scored once (overlap labels
masked), NLL token-weighted. Only scored positions' logits are computed (``logits_to_keep``); bits per byte
divide the NLL in bits by the scored text's UTF-8 bytes.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from geosteer.data.corpus import split_text
from geosteer.errors import GeosteerError
from geosteer.models.limits import check_positions
from geosteer.models.loading import input_device
from geosteer.models.tokenizers import adds_bos
from geosteer.progress import progress as progress_bar

_MAX_NLL = math.log(float.fromhex("0x1.fffffffffffffp+1023"))  # above this, exp(nll) overflows a float


@dataclass
class PerplexityResult:
    ppl: float
    nll: float  # mean NLL per scored token (nats)
    tokens: int  # scored tokens
    bits_per_byte: float
    context: int
    stride: int
    windows: int

    def to_dict(self) -> dict:
        return asdict(self)


def check_window(context: int, stride: int, prefix: str = "") -> None:
    """Refuse ``stride <= 0`` and ``context < stride``; ``prefix`` ("--" on the CLI) goes before each name."""
    if stride <= 0:
        raise GeosteerError(f"{prefix}stride must be > 0 (got {stride})")
    if context < stride:
        raise GeosteerError(f"{prefix}context ({context}) must be >= {prefix}stride ({stride})")


def window_spans(n_tokens: int, context: int, stride: int) -> list[tuple[int, int, int]]:
    """(begin, end, n_scored) per window, as in the HF strided-perplexity recipe."""
    check_window(context, stride)
    if n_tokens < 2:
        raise GeosteerError(f"text too short: {n_tokens} token(s), need at least 2 to score anything")
    spans = []
    prev_end = 0
    for begin in range(0, n_tokens, stride):
        end = min(begin + context, n_tokens)
        trg = end - prev_end
        spans.append((begin, end, trg))
        prev_end = end
        if end == n_tokens:
            break
    return spans


def encode(tok, text: str, add_bos: bool | None = None) -> torch.Tensor:
    """Token ids of ``text``; BOS first when ``add_bos``, or (``None``, default) when the tokenizer puts
    one first by itself (:func:`geosteer.models.tokenizers.adds_bos`). No other special tokens."""

    ids = tok(text, add_special_tokens=False, return_tensors="pt").input_ids[0]
    bos = getattr(tok, "bos_token_id", None)
    add_bos = adds_bos(tok) if add_bos is None else add_bos
    if add_bos and bos is not None and (len(ids) == 0 or ids[0].item() != bos):
        ids = torch.cat([torch.tensor([bos]), ids])
    return ids


def _scored_ids(tok, text: str | None, ids: torch.Tensor | None, *, batch_size: int, max_tokens: int | None,
                add_bos: bool | None, context: int | None) -> torch.Tensor:
    """The 1-D token ids to score, after checking the arguments (``context``: require one full window)."""
    if (text is None) == (ids is None):
        raise GeosteerError("give exactly one of text or ids")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise GeosteerError(f"batch size must be a whole number >= 1 (got {batch_size})")
    if text is not None:
        if not text.strip():
            raise GeosteerError("text is empty")
        ids = encode(tok, text, add_bos=add_bos)
    ids = ids.reshape(-1)
    if max_tokens is not None:
        if max_tokens < 2:
            raise GeosteerError(f"max_tokens must be >= 2 (got {max_tokens})")
        ids = ids[:max_tokens]
    if context is not None and len(ids) < context:
        raise GeosteerError(f"text is shorter than one window: {len(ids)} tokens < context {context}")
    return ids


@torch.no_grad()
def strided_perplexity(
    model,
    tok,
    text: str | None = None,
    *,
    ids: torch.Tensor | None = None,
    context: int = 512,
    stride: int = 256,
    batch_size: int = 4,
    max_tokens: int | None = None,
    add_bos: bool | None = None,
    require_full_window: bool = False,
    progress: bool = False,
) -> PerplexityResult:
    """Perplexity of ``text`` (or token ``ids``) under ``model`` with whatever interventions are active."""
    ids = _scored_ids(tok, text, ids, batch_size=batch_size, max_tokens=max_tokens, add_bos=add_bos,
                      context=context if require_full_window else None)
    spans = window_spans(len(ids), context, stride)
    check_positions(model, min(context, len(ids)), "context")
    device = input_device(model)
    # HF causal LMs can compute the vocabulary projection for the last k positions only: a window
    # scores at most ``stride`` tokens, so most of the (batch, context, vocab) logits are never needed.
    keep_ok = "logits_to_keep" in inspect.signature(model.forward).parameters
    total_nll = 0.0
    total_tok = 0
    # Group windows by length so that each batch is rectangular.
    groups: dict[tuple[int, bool], list[tuple[int, int, int]]] = {}
    # The first window scores (almost) all its tokens and needs every position's logits: it gets a batch
    # of its own, so the others keep only ``stride + 1`` positions.
    for s in spans:
        groups.setdefault((s[1] - s[0], s[2] >= s[1] - s[0] - 1), []).append(s)

    with progress_bar(len(spans), "perplexity", unit="win", show=progress) as step:
        for (length, _), group in groups.items():
            for i in range(0, len(group), batch_size):
                chunk = group[i : i + batch_size]
                x = torch.stack([ids[b:e] for b, e, _ in chunk]).to(device)
                ns = [min(trg, length - 1) for _, _, trg in chunk]  # first window: first token has no prediction
                k = max(ns) + 1  # positions whose logits are needed: the predictions of the last k - 1 tokens
                kw = {"logits_to_keep": k} if keep_ok and k < length else {}
                logits = model(input_ids=x, use_cache=False, **kw).logits[:, -k:]
                for r, n in enumerate(ns):  # one row at a time: a (n, vocab) log-softmax, not (B, L, vocab)
                    nll = F.cross_entropy(logits[r, -n - 1 : -1].float(), x[r, -n:], reduction="none")
                    total_nll += nll.double().sum().item()
                    total_tok += n
                del logits
                step(len(chunk))
    mean_nll = total_nll / total_tok
    if not math.isfinite(mean_nll) or mean_nll > _MAX_NLL:
        raise GeosteerError(f"perplexity is not finite (mean NLL {mean_nll} nats over {total_tok} tokens): the "
                            "model, or an intervention attached to it, produces NaN or infinite logits")
    scored_text = tok.decode(ids[1:], skip_special_tokens=True)
    n_bytes = max(1, len(scored_text.encode("utf-8")))
    return PerplexityResult(
        ppl=math.exp(mean_nll),
        nll=mean_nll,
        tokens=total_tok,
        bits_per_byte=total_nll / math.log(2) / n_bytes,
        context=context,
        stride=stride,
        windows=len(spans),
    )


def heldout_ids(tok, max_tokens: int) -> torch.Tensor:
    """The first ``max_tokens`` tokens of the bundled corpus' held-out split, encoded as
    :func:`strided_perplexity` encodes text: the standard evaluation slice of the directional verbs."""

    return encode(tok, split_text("heldout", max_chars=max_tokens * 8))[:max_tokens]
