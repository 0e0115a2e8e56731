"""Independent-window loss: a corpus split cut into windows of ``seq_len`` tokens, BOS first in each, every
window scored whole and on its own. The evaluation protocol of the dynamics verbs, and of
``geosteer ppl --windows independent`` (the same function, so the numbers agree to the last digit).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from geosteer.data.corpus import split_text
from geosteer.eval.perplexity import encode
from geosteer.interventions import steer
from geosteer.models.loading import input_device


def corpus_windows(tok, split: str = "heldout", tokens: int = 2048, seq_len: int = 256) -> torch.Tensor:
    """Held-out (or train) corpus tokens cut into windows of ``seq_len`` (BOS first if any).

    ``tokens`` caps the total number of tokens; at least one window is returned.
    """

    if tokens < 1 or seq_len < 2:
        raise ValueError(f"need tokens >= 1 and seq_len >= 2 (got {tokens}, {seq_len})")
    bos = getattr(tok, "bos_token_id", None)
    body = seq_len - (1 if bos is not None else 0)
    n_win = max(1, tokens // seq_len)
    ids = encode(tok, split_text(split, max_chars=(n_win * body + 16) * 8), add_bos=False)
    if len(ids) < n_win * body:
        raise ValueError(f"the {split} split has only {len(ids)} tokens; asked for {n_win * body}")
    w = ids[: n_win * body].reshape(n_win, body)
    if bos is not None:
        w = torch.cat([torch.full((n_win, 1), bos, dtype=w.dtype), w], dim=1)
    return w


def nll_sum(model: nn.Module, ids: torch.Tensor) -> tuple[float, int]:
    """Σ next-token NLL (nats) over all positions of the windows ``ids`` (n, seq), and the count."""
    logits = model(input_ids=ids, use_cache=False).logits.float()
    nll = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
                          reduction="sum")
    return nll.item(), ids[:, 1:].numel()


@torch.no_grad()
def mean_loss(model: nn.Module, input_ids: torch.Tensor, batch_size: int = 4, interventions=()) -> float:
    """Mean next-token NLL over the windows ``input_ids`` under ``interventions``."""

    device = input_device(model)
    tot, n = 0.0, 0
    with steer(model, *interventions):
        for i in range(0, input_ids.shape[0], batch_size):
            s, c = nll_sum(model, input_ids[i : i + batch_size].to(device))
            tot += s
            n += c
    return tot / n
