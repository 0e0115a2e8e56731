"""Compare two model states (intervention lists ``a`` and ``b``) on a prompt set.

Per prompt: greedy change, first divergent token, next-token KL(P_a ‖ P_b) and paired-seed samples.
:class:`PairedComparison` computes ``a`` once and compares each ``b`` with :meth:`~PairedComparison.run`;
:func:`compare_states` is the one-shot form.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from geosteer.eval.generation import generate, generate_seeds, prompt_ids
from geosteer.interventions import steer
from geosteer.models.loading import input_device
from geosteer.progress import progress


@torch.no_grad()
def next_token_logprobs(model, tok, prompt: str, interventions: Sequence = (),
                        add_bos: bool | None = None) -> torch.Tensor:
    device = input_device(model)
    ids = prompt_ids(tok, prompt, add_bos).to(device)
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


def _text(p) -> str:
    """A prompt as text: a string, or anything with ``.text`` (``geosteer.eval.prompts.Prompt``)."""
    return p if isinstance(p, str) else p.text


class PairedComparison:
    """State ``a`` on ``prompts`` (strings or :class:`~geosteer.eval.prompts.Prompt`), computed once;
    ``seeds`` paired samples per prompt; ``add_bos`` as :func:`geosteer.eval.generation.prompt_ids`.
    """

    def __init__(self, model, tok, prompts: Sequence, a: Sequence = (), *, max_new_tokens: int = 30,
                 seeds: Sequence[int] = (), temperature: float = 0.8, top_k: int = 50,
                 add_bos: bool | None = None) -> None:
        self.model, self.tok, self.prompts = model, tok, list(prompts)
        self.max_new_tokens, self.seeds = max_new_tokens, list(seeds)
        self.temperature, self.top_k, self.add_bos = temperature, top_k, add_bos
        with progress(len(self.prompts), "state a", unit="prompt") as step:
            self.base = []
            for p in self.prompts:
                self.base.append(self._state(_text(p), a, sample=True))
                step()

    def _state(self, text: str, interventions: Sequence, sample: bool) -> tuple:
        """(next-token log-probs, greedy generation, seeded samples) of ``text`` under ``interventions``."""
        lp = next_token_logprobs(self.model, self.tok, text, interventions, self.add_bos)
        with steer(self.model, *interventions):
            g = generate(self.model, self.tok, text, self.max_new_tokens, add_bos=self.add_bos)
            s = (generate_seeds(self.model, self.tok, text, self.seeds, self.max_new_tokens, self.temperature,
                                self.top_k, add_bos=self.add_bos) if sample and self.seeds else [])
        return lp, g, s

    def run(self, b: Sequence, sample: bool = True) -> list[dict]:
        """One row per prompt: ``a`` (the baseline) vs ``b``; ``sample=False`` skips the seeded samples."""
        rows = []
        with progress(len(self.prompts), "state b", unit="prompt") as step:
            for p, base in zip(self.prompts, self.base, strict=True):
                rows.append(self._row(p, base, b, sample))
                step()
        return rows

    def _row(self, p, base: tuple, b: Sequence, sample: bool) -> dict:
        """One prompt's row: the baseline ``base`` vs the state ``b``."""
        lp_a, ga, sa = base
        lp_b, gb, sb = self._state(_text(p), b, sample)
        row = {"prompt": _text(p)}
        if not isinstance(p, str):
            row["category"] = p.category
        row.update({
            "greedy_changed": ga.token_ids != gb.token_ids,
            "first_divergence": first_divergence(ga.token_ids, gb.token_ids),
            "kl": kl_divergence(lp_a, lp_b),
            "top1_a": self.tok.decode([int(lp_a.argmax())]),
            "top1_b": self.tok.decode([int(lp_b.argmax())]),
            "text_a": ga.text,
            "text_b": gb.text,
        })
        if sb:
            changed = sum(x.token_ids != y.token_ids for x, y in zip(sa, sb, strict=True))
            row["sampled_changed"] = changed
            row["sampled_changed_frac"] = changed / len(sb)
            row["sample_seeds"] = len(sb)
        return row

    def baseline_rows(self) -> list[dict]:
        """The baseline's greedy text per prompt (and how many of its samples differ in the first 50 chars)."""
        rows = []
        for p, (_, g, samples) in zip(self.prompts, self.base, strict=True):
            row = {"prompt": _text(p)}
            if not isinstance(p, str):
                row["category"] = p.category
            row["text"] = g.text
            if samples:
                row["unique_samples_first50"] = len({s.text[:50] for s in samples})
            rows.append(row)
        return rows


def compare_states(
    model,
    tok,
    prompts: Sequence,
    a: Sequence = (),
    b: Sequence = (),
    max_new_tokens: int = 30,
    sample_seeds: Sequence[int] = (),
    temperature: float = 0.8,
    top_k: int = 50,
    add_bos: bool | None = None,
) -> list[dict]:
    """One tidy row per prompt, ``a`` vs ``b`` (see the module docstring and :class:`PairedComparison`)."""
    return PairedComparison(model, tok, prompts, a, max_new_tokens=max_new_tokens, seeds=sample_seeds,
                            temperature=temperature, top_k=top_k, add_bos=add_bos).run(b)


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


def summarize_by(rows: list[dict], key: str = "category") -> list[dict]:
    """:func:`summarize` per value of ``key`` (in first-seen order), then an ``"all"`` row over every row."""
    groups: dict = {}
    for r in rows:
        groups.setdefault(r[key], []).append(r)
    return [{key: k, **summarize(rs)} for k, rs in [*groups.items(), ("all", rows)]]
