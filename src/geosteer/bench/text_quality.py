"""Does an intervention keep text good? The steering benchmark's fluency measures on everyday prompts.

For each state (the stock model, or a recipe: e.g. surfaces at the strength ``surfaces_strength`` s,
coefficients × s), on each prompt the
greedy continuation (:func:`geosteer.bench.scoring.continue_prompts`), then, exactly as the benchmark scores
a lever (:mod:`geosteer.bench.scoring`): the share of repeated 4-grams of its tokens, the stock model's mean
log-prob per token of the continuation read on its own, and the fluency score
f = min(1, exp(ℓ − ℓ₀)) · (1 − repeated share) against the stock model's own continuation (ℓ₀). Beside
them the held-out strided perplexity of the state (the bundled corpus's held-out split), so one table says
whether a state lowers perplexity *and* keeps greedy text as good as the stock model's.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np

EVERYDAY_FILE = "everyday_prompts.json"


def bootstrap(x, n_boot: int = 2000, seed: int = 0) -> dict:
    """{mean, lo, hi}: the mean of ``x`` and its 95 % percentile bootstrap interval (resampling items)."""
    a = np.asarray(x, dtype=float)
    if a.size == 0:
        return {"mean": math.nan, "lo": math.nan, "hi": math.nan}
    if a.size == 1:
        return {"mean": float(a[0]), "lo": math.nan, "hi": math.nan}
    rng = np.random.default_rng(seed)
    means = a[rng.integers(0, a.size, size=(n_boot, a.size))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return {"mean": float(a.mean()), "lo": float(lo), "hi": float(hi)}


@lru_cache(maxsize=1)
def everyday_prompts() -> tuple[str, ...]:
    """Twenty everyday prompts (requests and openings a user types), bundled with geosteer."""
    text = resources.files("geosteer.data").joinpath("prompts", EVERYDAY_FILE).read_text(encoding="utf-8")
    return tuple(json.loads(text))


@dataclass
class State:
    """One state measured: a name, the interventions to attach (none: the stock model), its strength."""

    name: str
    interventions: list
    strength: float = 1.0


def measure_states(model, tok, states: list[State], prompts: list[str], new_tokens: int,
                   ppl_tokens: int = 0, seed: int = 0, log=None) -> list[dict]:
    """One row per state: repeated-4-gram share, stock log-prob, fluency score (means, 95 % bootstrap
    intervals over prompts), held-out perplexity (``ppl_tokens`` > 0) and two example continuations.
    ``prompts`` are already formatted (chat template or plain); the first state must be the stock model."""
    from geosteer.bench.scoring import continue_prompts, fluency_values, repeated_ngram_share, text_logprob
    from geosteer.interventions import steer

    if not states or states[0].interventions:
        raise ValueError("the first state must be the stock model (no interventions): it is the reference")
    rows, ref = [], None
    for st in states:
        if log:
            log(f"{st.name} s={st.strength:g}: {len(prompts)} prompts x {new_tokens} tokens")
        with steer(model, *st.interventions):
            cont = continue_prompts(model, tok, prompts, new_tokens)
        rep = np.array([repeated_ngram_share(x) for x in cont.ids])
        lp = text_logprob(model, tok, cont.ids)  # nothing attached: the stock model reads the text
        ref = lp if ref is None else ref  # the stock model's own continuations: ℓ₀
        f = fluency_values(lp, ref, rep)
        row = {"state": st.name, "strength": st.strength,
               "repeated_4gram_share": bootstrap(rep, seed=seed),
               "logprob": bootstrap(lp[~np.isnan(lp)], seed=seed),
               "fluency_score": bootstrap(f, seed=seed), "n_prompts": len(prompts),
               "examples": cont.texts[:2]}
        if ppl_tokens:
            row["heldout_ppl"] = heldout_ppl(model, tok, st.interventions, ppl_tokens)
        rows.append(row)
    return rows


def heldout_ppl(model, tok, interventions: list, tokens: int) -> float:
    """Strided perplexity (context 512, stride 256) of the first ``tokens`` tokens of the held-out split."""
    from geosteer.data.corpus import split_text
    from geosteer.eval.perplexity import strided_perplexity
    from geosteer.interventions import steer

    with steer(model, *interventions):
        r = strided_perplexity(model, tok, split_text("heldout"), context=512, stride=256, max_tokens=tokens)
    return float(r.ppl)
