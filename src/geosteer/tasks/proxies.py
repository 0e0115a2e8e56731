"""Zero-shot multiple-choice PROXY tasks from the held-out corpus (not the standard benchmarks).

``proxy_cloze`` (last word, in-article distractors), ``proxy_nextsent`` (next sentence, distractors from
other articles) and ``proxy_fact`` (a year or proper noun not in the context). Scored by lm-eval's
``multiple_choice``; chance is 25 % (docs/tasks.md).
"""

from __future__ import annotations

import random
import re

from geosteer.data.corpus import split_texts
from geosteer.errors import GeosteerError

PROXIES = ("proxy_cloze", "proxy_nextsent", "proxy_fact")
TAGS = {"proxy_cloze": "geosteer_proxy", "proxy_nextsent": "geosteer_proxy", "proxy_fact": "geosteer_fact"}
N_CHOICES = 4


def _articles() -> list[list[str]]:

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


_YEAR = re.compile(r"(?<= )(1[5-9]\d\d|20[0-2]\d)\b")
_NAME = re.compile(r"(?<= )([A-Z][a-z]{3,})\b")
_NOT_NAMES = frozenset("""The This That These Those There Their They When Where While Which What After Before
During Since Until With Without From Into About Although However Also Many Most Some Other Such Each Both
Following According Between Under Over Among Around Through January February March April June July August
September October November December Monday Tuesday Wednesday Thursday Friday Saturday Sunday""".split())


def _fact_spans(sents: list[str]) -> list[tuple[str, str, str]]:
    """(kind, context, answer) for each sentence with a usable year or proper noun (the first one)."""
    out = []
    for i, s in enumerate(sents):
        prev = sents[i - 1] if i else ""
        hits = [(m.start(), "year", m.group(1)) for m in _YEAR.finditer(s)]
        hits += [(m.start(), "name", m.group(1)) for m in _NAME.finditer(s) if m.group(1) not in _NOT_NAMES]
        for start, kind, ans in sorted(hits):
            head = s[:start].rstrip()
            ctx = f"{prev} {head}".strip()
            if len(head.split()) >= 4 and ans.lower() not in ctx.lower():
                out.append((kind, ctx, ans))
                break
    return out


def _fact(rng: random.Random, n: int) -> list[dict]:
    arts = _articles()
    years = sorted({int(y) for sents in arts for s in sents for y in _YEAR.findall(s)})
    names = [{m for s in sents for m in _NAME.findall(s) if m not in _NOT_NAMES} for sents in arts]
    spans = [(a, *span) for a, sents in enumerate(arts) for span in _fact_spans(sents)]
    by_kind = {k: [c for c in spans if c[1] == k] for k in ("year", "name")}
    for v in by_kind.values():
        rng.shuffle(v)
    # alternate years and names (as many years as there are, up to half): a mix of both kinds of fact
    cands = [c for pair in zip(by_kind["year"], by_kind["name"], strict=False) for c in pair]
    cands += by_kind["name"][len(by_kind["year"]):] + by_kind["year"][len(by_kind["name"]):]
    out = []
    for a, kind, ctx, ans in cands:
        if kind == "year":
            pool = [str(y) for y in years if y != int(ans) and abs(y - int(ans)) <= 60]
        else:
            pool = sorted({w for b, ws in enumerate(names) if b != a for w in ws if w.lower() not in ctx.lower()}
                          - names[a])
        if len(pool) < N_CHOICES - 1:
            continue
        choices = rng.sample(pool, N_CHOICES - 1) + [ans]
        rng.shuffle(choices)
        out.append({"context": ctx, "choices": choices, "answer": choices.index(ans), "kind": kind})
        if len(out) == n:
            break
    return out


def generate(task: str, n: int, seed: int) -> list[dict]:
    """``n`` items of a proxy task (fewer only if the held-out split runs out). Same seed → same items."""
    if task not in PROXIES:
        raise GeosteerError(f"unknown proxy task '{task}'; valid: {', '.join(PROXIES)}")
    rng = random.Random(f"geosteer-proxy/{task}/{seed}")
    docs = {"proxy_cloze": _cloze, "proxy_nextsent": _nextsent, "proxy_fact": _fact}[task](rng, n)
    return [dict(d, index=i) for i, d in enumerate(docs)]
