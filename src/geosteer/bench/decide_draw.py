"""What a seed of the decisive benchmark redraws, and the one generator every draw comes from.

A (concept, seed) unit draws its lever texts, its test prompts and its judge's training texts from pools that are
larger than what is drawn (:mod:`geosteer.bench.decide_concepts`). Every draw is keyed by (run seed, concept
name, purpose) through :func:`rng`: a numpy Generator built from a SeedSequence of the seed and stable SHA-256
hashes of the name and the purpose. The same seed reproduces a concept exactly, whatever the order the units run
in; another seed redraws it; two concepts draw independently. What a seed does not redraw is listed in
:data:`FIXED` and recorded with the run (:func:`record`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TypeVar

import numpy as np

T = TypeVar("T")

REDRAWN = ("lever texts (each side, from the concept's lever pool)",
           "test prompts (from the concept's prompt pool: neutral requests, or a suppressed topic's titles)",
           "the judge's training texts (from the concept's judge pool, disjoint from the lever texts)",
           "the initialisations and mini-batch order of the learned levers")
GROUPED_REDRAWN = ("for a concept file grouped by request, the requests held out with the test prompts (the "
                   "texts answering a drawn test prompt are neither lever nor judge texts of that seed)",)
FIXED = ("the pools themselves (dealt once by hash)",
         "the admission sets (a topic's admission titles, the instructed admission requests, a file's admission "
         "texts) and the stock model's continuations of them",
         "the control prompts and the training requests",
         "the learning rates and the step cap (chosen on the dev concepts at seed 0)")


def stable_hash(text: str) -> int:
    """A 64-bit integer from the SHA-256 of ``text`` (stable across processes, unlike ``hash``)."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


def rng(seed: int, concept: str, purpose: str) -> np.random.Generator:
    """The generator of one draw: SeedSequence([seed, stable_hash(concept), stable_hash(purpose)])."""
    if int(seed) != seed or seed < 0:
        raise ValueError(f"a seed is a non-negative integer (got {seed!r})")
    return np.random.default_rng(np.random.SeedSequence([int(seed), stable_hash(concept), stable_hash(purpose)]))


def shuffled(pool: Sequence[T], seed: int, concept: str, purpose: str) -> list[T]:
    """``pool`` in the random order of (seed, concept, purpose)."""
    order = rng(seed, concept, purpose).permutation(len(pool))
    return [pool[i] for i in order]


def draw(pool: Sequence[T], n: int, seed: int, concept: str, purpose: str) -> list[T]:
    """``n`` items of ``pool`` without replacement, in drawn order; ``n`` larger than the pool is an error."""
    if n > len(pool):
        raise ValueError(f"{concept}: cannot draw {n} {purpose} from a pool of {len(pool)}")
    return shuffled(pool, seed, concept, purpose)[:n]


def interleave(pools: Sequence[Sequence[T]]) -> list[T]:
    """The pools taken in turn, one item each (round robin), until all are used."""
    out: list[T] = []
    for i in range(max((len(p) for p in pools), default=0)):
        out += [p[i] for p in pools if i < len(p)]
    return out


def record(pools: dict, grouped: bool = False) -> dict:
    """What the run records about its draws: what a seed redraws, what it keeps, the pool sizes (``grouped``: a
    concept file grouped by request is run; without one the record is what it has always been)."""
    return {"redrawn": list(REDRAWN + (GROUPED_REDRAWN if grouped else ())), "fixed": list(FIXED), "pools": pools}


def summary_line(recorded: dict | None = None, grouped: bool = False) -> str:
    """One line for the dry run and the report: what a seed redraws and what it does not (``recorded``: a run's
    :func:`record`; None: this version's, ``grouped`` as for :func:`record`)."""
    recorded = recorded or record({}, grouped)
    return "seed redraws: " + "; ".join(recorded["redrawn"]) + ". Not redrawn: " + "; ".join(recorded["fixed"]) + "."
