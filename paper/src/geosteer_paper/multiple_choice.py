"""Multiple-choice scoring by log-likelihood, as lm-evaluation-harness's ``multiple_choice`` defines it.

For models lm-eval cannot wrap: each choice scores log P(delimiter + choice | context); ``acc`` / ``acc_norm``
(by character length) and ``mean_stderr`` as lm-eval's. A continuation of L ≤ W tokens sees lm-eval's
input exactly; longer ones are scored in blocks of W // 2 with W tokens of history each.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from geosteer.errors import GeosteerError


def byte_encode(text: str) -> list[int]:
    """UTF-8 bytes as token ids (the byte-level models' tokenizer)."""
    return list(text.encode("utf-8"))


def segments(n: int, n_cont: int, window: int) -> list[tuple[int, int, int]]:
    """(input_start, target_start, target_end) per forward for the last ``n_cont`` of ``n`` tokens.

    The input is tokens [input_start, target_end − 1); its positions target_start − 1 − input_start …
    target_end − 2 − input_start predict the targets."""
    if window < 2:
        raise GeosteerError(f"window must be at least 2 tokens, got {window}")
    c0 = n - n_cont
    if c0 < 1 or n_cont < 1:
        raise GeosteerError("multiple-choice scoring needs a non-empty context and continuation")
    if n_cont <= window:
        bounds = [(c0, n)]
    else:
        step = window // 2
        bounds = [(a, min(a + step, n)) for a in range(c0, n, step)]
    return [(max(0, b - 1 - window), a, b) for a, b in bounds]


@torch.no_grad()
def continuation_logprobs(model: torch.nn.Module, requests: Sequence[tuple[list[int], list[int]]], *,
                          window: int, batch_size: int = 32) -> list[float]:
    """Σ log p(continuation | context) for each ``(context_ids, continuation_ids)`` pair.

    Forwards are right-padded into batches (a causal model's real positions do not see the padding)."""
    jobs = []  # (request index, input ids, first target position in input, targets)
    for r, (ctx, cont) in enumerate(requests):
        full = list(ctx) + list(cont)
        for st, a, b in segments(len(full), len(cont), window):
            jobs.append((r, full[st:b - 1], a - 1 - st, full[a:b]))
    totals = [0.0] * len(requests)
    order = sorted(range(len(jobs)), key=lambda i: -len(jobs[i][1]))
    device = next(model.parameters()).device
    for k in range(0, len(order), batch_size):
        chunk = [jobs[i] for i in order[k:k + batch_size]]
        width = len(chunk[0][1])
        ids = torch.zeros(len(chunk), width, dtype=torch.long)
        for j, (_, inp, _, _) in enumerate(chunk):
            ids[j, :len(inp)] = torch.tensor(inp)
        logp = torch.log_softmax(model(input_ids=ids.to(device), use_cache=False).logits.double(), -1)
        for j, (r, _, p0, tgt) in enumerate(chunk):
            pos = torch.arange(p0, p0 + len(tgt))
            totals[r] += float(logp[j, pos, torch.tensor(tgt)].sum())
    return totals


def mc_metrics(lls: Sequence[float], choices: Sequence[str], gold: int) -> dict[str, float]:
    """lm-eval's acc / acc_norm for one item (acc_norm divides by the choice's length in characters)."""
    lens = [float(len(c)) for c in choices]
    pred = max(range(len(lls)), key=lambda i: (lls[i], -i))
    pred_norm = max(range(len(lls)), key=lambda i: (lls[i] / lens[i], -i))
    return {"acc": float(pred == gold), "acc_norm": float(pred_norm == gold)}


def _stderr(xs: list[float]) -> float:
    if len(xs) < 2:
        return float("nan")
    mu = sum(xs) / len(xs)
    return math.sqrt(sum((x - mu) ** 2 for x in xs) / (len(xs) - 1)) / math.sqrt(len(xs))


def score_multiple_choice(model: torch.nn.Module, docs: Sequence[dict], *, window: int,
                          encode: Callable[[str], list[int]] = byte_encode, delimiter: str = " ",
                          batch_size: int = 32) -> dict[str, float]:
    """Mean acc / acc_norm (with lm-eval's standard errors) over ``docs`` with ``context``, ``choices`` and
    ``answer`` (gold index), the fields of ``geosteer.tasks.proxies`` items."""
    if not docs:
        raise GeosteerError("no items to score")
    reqs, spans = [], []
    for d in docs:
        ctx = encode(d["context"])
        spans.append((len(reqs), len(d["choices"])))
        reqs += [(ctx, encode(delimiter + c)) for c in d["choices"]]
    lls = continuation_logprobs(model, reqs, window=window, batch_size=batch_size)
    per = [mc_metrics(lls[s:s + k], d["choices"], int(d["answer"])) for (s, k), d in zip(spans, docs, strict=True)]
    out: dict[str, float] = {"n": float(len(per))}
    for key in ("acc", "acc_norm"):
        xs = [p[key] for p in per]
        out[key] = sum(xs) / len(xs)
        out[key + "_stderr"] = _stderr(xs)
    return out
