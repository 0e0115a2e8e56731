"""Compare two model states (intervention lists ``a`` and ``b``) on a prompt set.

Per prompt: whether greedy output changed, the first divergent generated token, the next-token KL
divergence KL(P_a ‖ P_b) at the end of the prompt, and paired-seed sampling (the same seed for both
states, so a difference is caused by the state, not by the RNG).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from geosteer.eval.generation import generate, generate_seeds, prompt_ids
from geosteer.interventions import steer
from geosteer.models.loading import input_device


@torch.no_grad()
def next_token_logprobs(model, tok, prompt: str, interventions: Sequence = ()) -> torch.Tensor:
    device = input_device(model)
    ids = prompt_ids(tok, prompt).to(device)
    with steer(model, *interventions):
        logits = model(input_ids=ids, use_cache=False).logits[0, -1].float()
    return F.log_softmax(logits, dim=-1)


def kl_divergence(logp_a: torch.Tensor, logp_b: torch.Tensor) -> float:
    """KL(P_a ‖ P_b) = Σ p_a (log p_a − log p_b), in nats."""
    return float((logp_a.exp() * (logp_a - logp_b)).sum().clamp_min(0.0))


def first_divergence(x: Sequence[int], y: Sequence[int]) -> int | None:
    for i, (u, v) in enumerate(zip(x, y, strict=False)):
        if u != v:
            return i
    return None if len(x) == len(y) else min(len(x), len(y))


def compare_states(
    model,
    tok,
    prompts: Sequence[str],
    a: Sequence = (),
    b: Sequence = (),
    max_new_tokens: int = 30,
    sample_seeds: Sequence[int] = (),
    temperature: float = 0.8,
    top_k: int = 50,
) -> list[dict]:
    """One tidy row per prompt (see module docstring)."""
    rows = []
    for p in prompts:
        lp_a = next_token_logprobs(model, tok, p, a)
        lp_b = next_token_logprobs(model, tok, p, b)
        with steer(model, *a):
            ga = generate(model, tok, p, max_new_tokens)
        with steer(model, *b):
            gb = generate(model, tok, p, max_new_tokens)
        row = {
            "prompt": p,
            "greedy_changed": ga.token_ids != gb.token_ids,
            "first_divergence": first_divergence(ga.token_ids, gb.token_ids),
            "kl": kl_divergence(lp_a, lp_b),
            "top1_a": tok.decode([int(lp_a.argmax())]),
            "top1_b": tok.decode([int(lp_b.argmax())]),
            "text_a": ga.text,
            "text_b": gb.text,
        }
        if sample_seeds:
            with steer(model, *a):
                sa = generate_seeds(model, tok, p, sample_seeds, max_new_tokens, temperature, top_k)
            with steer(model, *b):
                sb = generate_seeds(model, tok, p, sample_seeds, max_new_tokens, temperature, top_k)
            changed = sum(x.token_ids != y.token_ids for x, y in zip(sa, sb, strict=True))
            row["sampled_changed_frac"] = changed / len(sample_seeds)
            row["sample_seeds"] = len(sample_seeds)
        rows.append(row)
    return rows


def summarize(rows: list[dict]) -> dict:
    n = len(rows)
    out = {
        "prompts": n,
        "greedy_change_rate": sum(r["greedy_changed"] for r in rows) / n if n else 0.0,
        "mean_kl": sum(r["kl"] for r in rows) / n if n else 0.0,
    }
    if rows and "sampled_changed_frac" in rows[0]:
        out["sampled_change_rate"] = sum(r["sampled_changed_frac"] for r in rows) / n
    return out
