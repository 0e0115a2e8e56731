"""RULER-style synthetic long-context tasks, generated locally and deterministically.

11 of RULER's 13 tasks (the two QA tasks need their data sets), with RULER's templates and answer formats,
on held-out corpus haystacks with corpus words; the differences are listed in docs/tasks.md. Every random
choice comes from a string-seeded ``random.Random``: the same arguments give byte-identical data.
"""

from __future__ import annotations

import random
import re
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from functools import lru_cache

from geosteer.data.corpus import split_texts
from geosteer.errors import GeosteerError

RULER_TASKS = ("niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multikey_2",
               "niah_multikey_3", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe", "qa_1", "qa_2")
TASKS = RULER_TASKS[:11]  # the synthetic ones we generate
MAX_NEW_TOKENS = {"niah": 64, "vt": 30, "cwe": 120, "fwe": 50}  # RULER's per-task generation budgets
NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."

Counter_ = Callable[[str], int]


def max_new_tokens(task: str) -> int:
    return MAX_NEW_TOKENS["niah" if task.startswith("niah") else task]


# --------------------------------------------------------------------------------------------- scorers
def string_match_all(pred: str, refs: Sequence[str]) -> float:
    """RULER's ``string_match_all``: the fraction of references found (case-insensitive) in ``pred``."""
    p = pred.lower()
    return sum(1.0 for r in refs if r.lower() in p) / len(refs)


def string_match_part(pred: str, refs: Sequence[str]) -> float:
    """RULER's ``string_match_part`` (QA tasks): 1 if any reference occurs in ``pred``."""
    p = pred.lower()
    return max(1.0 if r.lower() in p else 0.0 for r in refs)


# ------------------------------------------------------------------------------------- corpus material
@lru_cache(maxsize=1)
def heldout_sentences() -> tuple[str, ...]:

    out = []
    for text in split_texts("heldout"):
        for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", text.replace("\n", " ")):
            s = s.strip()
            if 20 <= len(s) <= 400:
                out.append(s)
    return tuple(out)


@lru_cache(maxsize=1)
def heldout_words() -> tuple[str, ...]:
    """Distinct lowercase alphabetic words (4–10 letters) of the held-out split, sorted."""
    words = {w for s in heldout_sentences() for w in re.findall(r"\b[a-z]{4,10}\b", s)}
    return tuple(sorted(words))


def _key_words(rng: random.Random, k: int) -> list[str]:
    w = heldout_words()
    return ["-".join(rng.sample(w, 2)) for _ in range(k)]  # RULER: adjective-noun pairs


def _number(rng: random.Random) -> str:
    return str(rng.randint(1_000_000, 9_999_999))


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


# ----------------------------------------------------------------------------------------- haystacks
def _fill(rng: random.Random, fixed_tokens: int, budget: int, count: Counter_, source: str,
          needles: Sequence[str]) -> str:
    """Haystack text with ``needles`` inserted at random depths, as long as fits ``budget`` tokens
    together with ``fixed_tokens`` (the rest of the prompt)."""
    room = budget - fixed_tokens - sum(count(n) + 1 for n in needles)
    if room < 16:
        raise GeosteerError(f"context length too short for this task ({budget} tokens)")
    if source == "noise":
        reps = max(1, room // max(1, count(NOISE) + 1))
        hay = [NOISE] * (reps + 2)
    else:
        sents = heldout_sentences()
        start = rng.randrange(len(sents))
        hay, used = [], 0
        i = start
        while used < room + 64:
            s = sents[i % len(sents)]
            hay.append(s)
            used += count(s) + 1
            i += 1
    # trim to the room (token counts of joined text are close to the sum; verified by the caller)
    while hay and sum(count(s) + 1 for s in hay) > room:
        hay.pop()
    depths = sorted(rng.randrange(len(hay) + 1) for _ in needles)
    for off, (d, n) in enumerate(zip(depths, needles, strict=True)):
        hay.insert(d + off, n)
    return " ".join(hay)


def _fit(build: Callable[[int], dict], length: int, count: Counter_) -> dict:
    """Call ``build(slack)`` with growing slack until its prompt + answer budget fits ``length``."""
    slack = 0
    for _ in range(8):
        doc = build(slack)
        n = count(doc["input"]) + doc["max_new_tokens"] + 1
        if n <= length:
            doc["length"] = n - doc["max_new_tokens"] - 1
            return doc
        slack += n - length + 8
    raise GeosteerError(f"could not fit a {doc['task']} example into {length} tokens")


# ---------------------------------------------------------------------------------------------- tasks
_NIAH = {  # task: (haystack, key kind, value kind, needles per key, n keys, n queries, n values)
    "niah_single_1": ("noise", "words", "numbers", 1, 1, 1),
    "niah_single_2": ("corpus", "words", "numbers", 1, 1, 1),
    "niah_single_3": ("corpus", "words", "uuids", 1, 1, 1),
    "niah_multikey_1": ("corpus", "words", "numbers", 4, 1, 1),
    "niah_multikey_2": ("needle", "words", "numbers", 1, 1, 1),
    "niah_multikey_3": ("needle", "uuids", "uuids", 1, 1, 1),
    "niah_multivalue": ("corpus", "words", "numbers", 1, 1, 4),
    "niah_multiquery": ("corpus", "words", "numbers", 4, 4, 1),
}


def _niah(task: str, rng: random.Random, length: int, count: Counter_) -> dict:
    hay_kind, key_kind, val_kind, n_keys, n_q, n_v = _NIAH[task]
    kind = "numbers" if val_kind == "numbers" else "UUIDs"
    one = "number" if val_kind == "numbers" else "UUID"
    val = _number if val_kind == "numbers" else _uuid

    def build(slack: int) -> dict:
        r = random.Random(rng.random())
        keys = _key_words(r, n_keys) if key_kind == "words" else [_uuid(r) for _ in range(n_keys)]
        values = [[val(r) for _ in range(n_v)] for _ in keys]
        needles = [f"One of the special magic {kind} for {k} is: {v}."
                   for k, vs in zip(keys, values, strict=True) for v in vs]
        queries = keys[:n_q]
        answers = [v for vs in values[:n_q] for v in vs]
        q = ", ".join(queries[:-1]) + (f", and {queries[-1]}" if n_q > 1 else queries[0])
        if n_q > 1:
            question = f"What are all the special magic {kind} for {q} mentioned in the provided text?"
            prefix = f" The special magic {kind} for {q} mentioned in the provided text are"
        elif n_v > 1:
            question = f"What are all the special magic {kind} for {q} mentioned in the provided text?"
            prefix = f" The special magic {kind} for {q} mentioned in the provided text are"
        else:
            question = f"What is the special magic {one} for {q} mentioned in the provided text?"
            prefix = f" The special magic {one} for {q} mentioned in the provided text is"
        head = (f"Some special magic {kind} are hidden within the following text. Make sure to memorize it. "
                f"I will quiz you about the {kind} afterwards.\n")
        tail = f"\n{question}{prefix}"
        budget = length - max_new_tokens(task) - 1 - slack
        fixed = count(head) + count(tail)
        if hay_kind == "needle":  # the haystack is made of distractor needles only
            room = budget - fixed - sum(count(n) + 1 for n in needles)
            filler: list[str] = []
            while room > 0:
                k = _key_words(r, 1)[0] if key_kind == "words" else _uuid(r)
                s = f"One of the special magic {kind} for {k} is: {val(r)}."
                room -= count(s) + 1
                if room >= 0:
                    filler.append(s)
            for n in needles:
                filler.insert(r.randrange(len(filler) + 1), n)
            context = " ".join(filler)
        else:
            context = _fill(r, fixed, budget, count, hay_kind, needles)
        return {"task": task, "input": head + context + tail, "outputs": answers,
                "max_new_tokens": max_new_tokens(task)}

    return _fit(build, length, count)


def _vt(rng: random.Random, length: int, count: Counter_, hops: int = 4) -> dict:
    def build(slack: int) -> dict:
        r = random.Random(rng.random())
        names = ["".join(r.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(5)) for _ in range(hops + 1)]
        value = str(r.randint(10000, 99999))
        chain = [f"VAR {names[0]} = {value}."] + [f"VAR {names[i + 1]} = VAR {names[i]}." for i in range(hops)]
        head = ("Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n")
        tail = (f"\nQuestion: Find all variables that are assigned the value {value} in the text above."
                f" Answer: According to the chain(s) of variable assignment in the text above, {hops + 1} "
                f"variables are assigned the value {value}, they are:")
        budget = length - max_new_tokens("vt") - 1 - slack
        ctx = _fill(r, count(head) + count(tail), budget, count, "corpus", [])
        parts = ctx.split(" ")  # re-insert the chain in order at increasing depths
        depths = sorted(r.randrange(len(parts) + 1) for _ in chain)
        for off, (d, c) in enumerate(zip(depths, chain, strict=True)):
            parts.insert(d + off, c)
        return {"task": "vt", "input": head + " ".join(parts) + tail, "outputs": names,
                "max_new_tokens": max_new_tokens("vt")}

    return _fit(build, length, count)


def _cwe(rng: random.Random, length: int, count: Counter_, n_common: int = 10) -> dict:
    """RULER's common-words extraction: 10 words repeated ``freq_common`` times among rarer ones. RULER uses
    30 / 3 repetitions (at >= 4k tokens); shorter contexts get ~60 % of the list for the common words,
    at most 30 repetitions each, the others one to three times."""

    def build(slack: int) -> dict:
        r = random.Random(rng.random())
        vocab = r.sample(heldout_words(), 400)
        common, rare = vocab[:n_common], vocab[n_common:]
        head = ("Below is a numbered list of words. In these words, some appear more often than others. "
                "Memorize the ones that appear most often.\n")
        tail = ("\nQuestion: What are the 10 most common words in the above list? Answer: The top 10 words "
                "that appear most often in the list are:")
        budget = length - max_new_tokens("cwe") - 1 - slack - count(head) - count(tail)
        per = sum(count(f" {i}. {w}") for i, w in enumerate(vocab[:50], 100)) / 50
        n_total = int(budget / per)
        freq_common = max(2, min(30, int(0.6 * n_total / n_common)))
        freq_rare = min(3, freq_common - 1)
        words = [w for w in common for _ in range(freq_common)]
        n_rare = max(0, min(len(rare), (n_total - len(words)) // freq_rare))
        words += [w for w in rare[:n_rare] for _ in range(freq_rare)]
        r.shuffle(words)
        body = " ".join(f"{i}. {w}" for i, w in enumerate(words, 1))
        return {"task": "cwe", "input": head + body + tail, "outputs": common,
                "max_new_tokens": max_new_tokens("cwe")}

    return _fit(build, length, count)


def _fwe(rng: random.Random, length: int, count: Counter_, alpha: float = 2.0, vocab_size: int = 800) -> dict:
    def build(slack: int) -> dict:
        r = random.Random(rng.random())
        vocab = ["".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(r.randint(3, 6)))
                 for _ in range(vocab_size)]
        weights = [1.0 / (k + 1) ** alpha for k in range(vocab_size)]
        head = ("Read the following coded text and track the frequency of each coded word. Find the three "
                "most frequently appeared coded words. ")
        tail = ("\nQuestion: Do not provide any explanation. What are the three "
                "most frequently appeared words in the above coded text? Answer: According to the coded text "
                "above, the three most frequently appeared words are:")
        budget = length - max_new_tokens("fwe") - 1 - slack - count(head) - count(tail)
        per = sum(count(f" {w}") for w in vocab[:100]) / 100
        words = r.choices(vocab, weights=weights, k=max(10, int(budget / per)))
        while True:  # a tie at the cut (3rd vs 4th) would make the answer ambiguous: thin the 4th
            top = Counter(words).most_common(4)
            if len(top) < 4 or top[2][1] > top[3][1]:
                break
            words.remove(top[3][0])
        answers = [w for w, _ in Counter(words).most_common(3)]
        return {"task": "fwe", "input": head + " ".join(words) + tail, "outputs": answers,
                "max_new_tokens": max_new_tokens("fwe")}

    return _fit(build, length, count)


def generate(task: str, length: int, n: int, seed: int, count: Counter_) -> list[dict]:
    """``n`` examples of ``task`` whose prompt + generation budget fits ``length`` tokens (``count``
    counts tokens with the evaluated model's tokenizer). Same arguments → the same list."""
    if task not in TASKS:
        known = ", ".join(TASKS)
        extra = " (RULER's QA tasks need SQuAD/HotpotQA and are not generated)" if task in RULER_TASKS else ""
        raise GeosteerError(f"unknown RULER-style task '{task}'{extra}; valid: {known}")
    out = []
    for i in range(n):
        rng = random.Random(f"geosteer-ruler/{task}/{length}/{seed}/{i}")
        if task.startswith("niah"):
            doc = _niah(task, rng, length, count)
        else:
            doc = {"vt": _vt, "cwe": _cwe, "fwe": _fwe}[task](rng, length, count)
        doc["index"] = i
        out.append(doc)
    return out
