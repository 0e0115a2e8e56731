"""Zero-shot multiple-choice PROXY tasks from the held-out corpus (not the standard benchmarks).

The standard zero-shot sets of the paper's Table 1 (OBQA, PIQA, WinoGrande, ARC-C, HellaSwag, BoolQ,
RTE) cannot be downloaded here. These two tasks measure the same kind of thing — does the edited model
still rank the right continuation first — on text the model can be scored on offline:

- ``proxy_cloze``: a held-out sentence without its last word; choices are the true last word and three
  other words of the same article (LAMBADA-like, but with in-article distractors).
- ``proxy_nextsent``: two consecutive sentences of an article as context; choices are the true next
  sentence and three sentences from other held-out articles (HellaSwag/SWAG-like, without adversarial
  filtering).

Scored by lm-eval's ``multiple_choice`` (``acc``, ``acc_norm``); chance is 25 %.
"""

from __future__ import annotations

import random
import re

from geosteer.errors import GeosteerError

PROXIES = ("proxy_cloze", "proxy_nextsent")
N_CHOICES = 4


def _articles() -> list[list[str]]:
    from geosteer.data.corpus import split_texts

    out = []
    for text in split_texts("heldout"):
        sents = [s.strip() for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", text.replace("\n", " "))]
        out.append([s for s in sents if 30 <= len(s) <= 300])
    return out


def _cloze(rng: random.Random, n: int) -> list[dict]:
    cands = []
    for a, sents in enumerate(_articles()):
        words = sorted({w for s in sents for w in re.findall(r"\b[A-Za-z]{3,}\b", s)})
        for s in sents:
            m = re.match(r"^(.*\S)\s+([A-Za-z]{3,})([.!?])$", s)
            if m and len(m.group(1).split()) >= 6:
                cands.append((a, m.group(1), m.group(2), words))
    rng.shuffle(cands)
    out = []
    for _a, ctx, last, words in cands:
        pool = [w for w in words if w.lower() != last.lower()]
        if len(pool) < N_CHOICES - 1:
            continue
        choices = rng.sample(pool, N_CHOICES - 1) + [last]
        rng.shuffle(choices)
        out.append({"context": ctx, "choices": choices, "answer": choices.index(last)})
        if len(out) == n:
            break
    return out


def _nextsent(rng: random.Random, n: int) -> list[dict]:
    arts = _articles()
    cands = [(a, i) for a, sents in enumerate(arts) for i in range(len(sents) - 2)]
    rng.shuffle(cands)
    out = []
    for a, i in cands[:n]:
        sents = arts[a]
        true = sents[i + 2]
        others = []
        while len(others) < N_CHOICES - 1:
            b = rng.randrange(len(arts))
            if b != a and arts[b]:
                s = rng.choice(arts[b])
                if s not in others and s != true:
                    others.append(s)
        choices = others + [true]
        rng.shuffle(choices)
        out.append({"context": f"{sents[i]} {sents[i + 1]}", "choices": choices, "answer": choices.index(true)})
    return out


def generate(task: str, n: int, seed: int) -> list[dict]:
    """``n`` items of a proxy task (fewer only if the held-out split runs out). Same seed → same items."""
    if task not in PROXIES:
        raise GeosteerError(f"unknown proxy task '{task}'; valid: {', '.join(PROXIES)}")
    rng = random.Random(f"geosteer-proxy/{task}/{seed}")
    docs = (_cloze if task == "proxy_cloze" else _nextsent)(rng, n)
    return [dict(d, index=i) for i, d in enumerate(docs)]
