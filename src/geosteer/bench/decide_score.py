"""The three scores of the decisive benchmark for one point, per prompt, AxBench's way.

For a point (a lever at one strength) and the concept's test prompts, the greedy continuation of each prompt is
read three ways:

- **concept** c: the embedding judge's P(concept | continuation) (1 − P for a suppressed concept);
- **instruction relevance** r: the cosine of prompt and continuation embeddings relative to the stock model's
  continuation of the same prompt (:func:`geosteer.bench.judges.relative_relevance`);
- **fluency** f = min(1, exp(ℓ − ℓ_stock)) · (1 − repeated-4-gram share), ℓ being the mean log-prob per token of
  the continuation read by an **independent** model (the reader: another family than the steered model), ℓ_stock
  the same for the stock continuation; an empty continuation scores f = 0;

and **score** = 3 / (1/c + 1/r + 1/f), their harmonic mean (0 when any is 0). Control KL is the mean next-token
KL(P_stock ‖ P_point) over the neutral control prompts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from geosteer.bench.judges import lexicon_prob, relative_relevance, relevance
from geosteer.bench.prompts import format_prompt
from geosteer.bench.scoring import (
    continue_prompts,
    fluency_values,
    kl_rows,
    next_token_logprobs,
    repeated_ngram_share,
    text_logprob,
)
from geosteer.interventions import steer


@dataclass
class Readers:
    """The steered model and what reads its text: the reader model (fluency) and the sentence encoder."""
    model: object
    tok: object
    reader: object
    reader_tok: object
    encoder: object
    chat: bool = True


def fmt(r: Readers, prompt: str, instruction: str | None = None) -> str:

    return format_prompt(r.tok, prompt, r.chat, instruction)


def generate(r: Readers, point, prompts: list[str], new_tokens: int):
    """The point's greedy continuations of ``prompts`` (raw; the point's instruction applied)."""
    with point.interventions() as ivs, steer(r.model, *ivs):
        return continue_prompts(r.model, r.tok, [fmt(r, p, point.instruction) for p in prompts], new_tokens)


def control_logprobs(r: Readers, point, controls: list[str]):

    with point.interventions() as ivs, steer(r.model, *ivs):
        return next_token_logprobs(r.model, r.tok, [fmt(r, c, point.instruction) for c in controls])


def control_kl(r: Readers, point, controls: list[str], ref) -> float:

    return float(kl_rows(ref, control_logprobs(r, point, controls)).mean())


def reader_logprob(r: Readers, texts: list[str]) -> np.ndarray:
    """Mean log-prob per token of each text read by the reader model on its own (nan for an empty text)."""
    ids = [r.reader_tok(t, add_special_tokens=False)["input_ids"] if t.strip() else [] for t in texts]
    return text_logprob(r.reader, r.reader_tok, ids)


def harmonic3(c: np.ndarray, rel: np.ndarray, f: np.ndarray) -> np.ndarray:
    """3 / (1/c + 1/r + 1/f) per item, 0 where any of the three is 0."""
    c, rel, f = (np.asarray(x, np.float64) for x in (c, rel, f))
    ok = (c > 0) & (rel > 0) & (f > 0)
    safe = [np.where(ok, x, 1.0) for x in (c, rel, f)]
    return np.where(ok, 3.0 / (1 / safe[0] + 1 / safe[1] + 1 / safe[2]), 0.0)


def read_texts(r: Readers, judge, promote: bool, prompts: list[str], texts: list[str], ids: list[list[int]],
               lexicon: str | None = None) -> dict:
    """The raw per-prompt readings of continuations: judge P, lexicon P, similarity, reader ℓ, repetition."""
    p = np.asarray(judge.prob(texts), np.float64)
    out = {"texts": list(texts), "judge_p": p.tolist(),
           "concept": (p if promote else 1.0 - p).tolist(),
           "similarity": relevance(prompts, texts, r.encoder).tolist(),
           "reader_logprob": reader_logprob(r, texts).tolist(),
           "repeated": [repeated_ngram_share(x) for x in ids]}
    if lexicon:
        lp = lexicon_prob(texts, lexicon)
        out["lexicon_concept"] = (lp if promote else 1.0 - lp).tolist()
    return out


def scored(raw: dict, stock: dict) -> dict:
    """``raw`` with relevance, fluency and score per prompt, against the stock model's readings ``stock``."""
    rel = relative_relevance(raw["similarity"], stock["similarity"])
    f = fluency_values(np.asarray(raw["reader_logprob"], np.float64), np.asarray(stock["reader_logprob"], np.float64),
                np.asarray(raw["repeated"], np.float64))
    s = harmonic3(np.asarray(raw["concept"]), rel, f)
    return {**raw, "relevance": rel.tolist(), "fluency": f.tolist(), "score": s.tolist()}
