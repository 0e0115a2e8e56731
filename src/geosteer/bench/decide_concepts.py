"""The concepts of the decisive steering benchmark, built deterministically from the bundled corpus and templates.

Topic concepts come from the corpus's topics (:mod:`geosteer.data.corpus`, train split only): each topic's
articles are dealt by title hash into a lever pool (what the levers learn from), a judge pool (>= 200 texts a
side, disjoint from the levers') and a title pool (the prompts "Tell me about <title>." that a suppressed topic is
tested on, and the admission prompts). Sentiment, register and refusal texts are templated sentences (a
subject, a clause and an ending combined), again dealt into disjoint lever and judge pools.

Every concept has a judge set (:attr:`DecideConcept.judge_positive` / ``judge_negative``), an admission set
(the stock model's own continuations with known labels: topic titles, or one instruction against its
opposite) and >= 16 test prompts that share no word 3-gram with the levers' training requests.

A user's concept file (geosteer's JSON or an AxBench file, :func:`file_concepts`) gives concepts of the same
shape: each side's texts hash-dealt into LEVER_TEXTS lever texts, ADMISSION_TEXTS held-out admission texts
(the file's own labelled texts: no labelled continuations of the stock model exist for them) and the rest,
at least FILE_JUDGE_TEXTS, for the judge; its prompts are the test prompts.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path

from geosteer.bench import decide_templates as T
from geosteer.bench.axbench import load_concepts
from geosteer.bench.concepts import concept_from_dict
from geosteer.bench.decide_templates import SPECS
from geosteer.data.corpus import articles, split_of
from geosteer.errors import GeosteerError

TOPICS = {"arts": "Arts", "health": "Biology and health sciences", "everyday-life": "Everyday life",
          "geography": "Geography", "history": "History", "mathematics": "Mathematics", "people": "People",
          "religion": "Philosophy and religion", "physical-sciences": "Physical sciences",
          "society": "Society and social sciences", "technology": "Technology"}
DESCRIPTIONS = {"arts": "the arts: music, painting, film and literature", "health": "health, biology and medicine",
                "everyday-life": "everyday life: food, sport, clothing and homes",
                "geography": "geography: countries, rivers, mountains and places",
                "history": "history and historical events", "mathematics": "mathematics",
                "people": "famous people and their lives", "religion": "philosophy and religion",
                "physical-sciences": "physics, chemistry and astronomy", "society": "society, politics and economics",
                "technology": "technology and engineering"}
PROMOTED_TOPICS = ("arts", "health", "everyday-life", "geography", "history", "mathematics", "religion",
                   "physical-sciences", "society", "technology")
SUPPRESSED_TOPICS = ("arts", "health", "geography", "history", "religion", "physical-sciences", "society",
                     "technology")
DEV = ("people", "no-people", "no-mathematics", "no-everyday-life")  # topics no test concept suppresses
LEVER_TEXTS = 8  # per side of a file's concept (the training pool is their passages)
TOPIC_LEVER_TEXTS = 16  # articles per side of a topic (their 24-word passages fill a pool of 32)
TEMPLATED_LEVER_TEXTS = 32  # per side of a templated concept (one sentence each: the pool is these sentences)
JUDGE_TEXTS = 200  # per side (negatives: twice as many, spread over the other topics)
JUDGE_WORDS = 40  # judge texts are cut to about a continuation's length
TEST_PROMPTS = 16
ADMISSION_TITLES = 10  # per topic
ADMISSION_PROMPTS = 16  # per instruction-labelled concept
TITLE_PROMPT = "Tell me about {}."
PROMPTS_FILE = "decide_prompts.json"
ADMISSION_TEXTS = 16  # per side, of a concept file's concept
FILE_JUDGE_TEXTS = 32  # per side, at least, of a concept file's concept


@dataclass(frozen=True)
class DecideConcept:
    """One concept: ``concept`` is what the levers read (:mod:`geosteer.bench.concepts`' schema, its positive /
    negative being the lever texts and its prompts the test prompts); ``kind`` groups concepts in the report."""

    concept: object
    kind: str
    judge_positive: list[str]
    judge_negative: list[str]
    admission: dict  # {"kind": "titles", "topic": T} or {"kind": "instruction", "positive": I, "negative": J|None}
    lexicon: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.concept.name


def _h(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _cut(text: str, words: int = JUDGE_WORDS) -> str:
    return " ".join(text.split()[:words])


@lru_cache(maxsize=1)
def topic_pools() -> dict[str, dict[str, list]]:
    """topic key -> {"lever": articles, "judge": articles, "titles": article titles}, train split, hash-dealt:
    the first TOPIC_LEVER_TEXTS to the levers, the next JUDGE_TEXTS to the judge, the rest give titles."""
    out = {}
    for key, topic in TOPICS.items():
        arts = sorted((a for a in articles() if a.topic == topic and split_of(a.title) == "train"),
                      key=lambda a: _h("decide", topic, a.title))
        n = TOPIC_LEVER_TEXTS
        out[key] = {"lever": arts[:n], "judge": arts[n:n + JUDGE_TEXTS],
                    "titles": [a.title for a in arts[n + JUDGE_TEXTS:]]}
    return out


def _others(key: str, part: str, n: int) -> list[str]:
    """``n`` texts of ``part`` from the other topics, taken in turn (round robin)."""
    pools = [topic_pools()[k][part] for k in TOPICS if k != key]
    flat = [a for row in itertools.zip_longest(*pools) for a in row if a is not None]
    return [a.text for a in flat[:n]]


def test_titles(key: str) -> list[str]:
    return topic_pools()[key]["titles"][:TEST_PROMPTS]


def admission_titles(key: str) -> list[str]:
    return topic_pools()[key]["titles"][TEST_PROMPTS:TEST_PROMPTS + ADMISSION_TITLES]


@lru_cache(maxsize=1)
def neutral_requests() -> tuple[str, ...]:
    """The neutral request pool: the first TEST_PROMPTS are test prompts, the next ADMISSION_PROMPTS admission."""
    return tuple(json.loads(resources.files("geosteer.data").joinpath("prompts", PROMPTS_FILE)
                            .read_text(encoding="utf-8")))


def test_requests() -> list[str]:
    return list(neutral_requests()[:TEST_PROMPTS])


def admission_requests() -> list[str]:
    return list(neutral_requests()[TEST_PROMPTS:TEST_PROMPTS + ADMISSION_PROMPTS])


def _concept(name: str, direction: str, positive: list[str], negative: list[str], prompts: list[str],
             description: str):

    return concept_from_dict({"name": name, "direction": direction, "positive": positive, "negative": negative,
                              "prompts": prompts, "description": description})


def topic_concept(key: str, direction: str) -> DecideConcept:
    """A topic promoted on neutral requests, or suppressed ("no-<topic>") on requests about its own titles."""
    pool = topic_pools()[key]
    pos = [a.text for a in pool["lever"]]
    neg = _others(key, "lever", TOPIC_LEVER_TEXTS)
    prompts = test_requests() if direction == "promote" else [TITLE_PROMPT.format(t) for t in test_titles(key)]
    name = key if direction == "promote" else f"no-{key}"
    c = _concept(name, direction, pos, neg, prompts, DESCRIPTIONS[key])
    return DecideConcept(c, f"topic-{direction}", [_cut(a.text) for a in pool["judge"]],
                         [_cut(t) for t in _others(key, "judge", 2 * JUDGE_TEXTS)],
                         {"kind": "titles", "topic": key})


def _deal(texts: list[str], tag: str) -> tuple[list[str], list[str]]:
    """(lever texts, judge texts) of one templated side."""
    ordered = sorted(set(texts), key=lambda t: _h("decide", tag, t))
    return ordered[:TEMPLATED_LEVER_TEXTS], ordered[TEMPLATED_LEVER_TEXTS:]


def templated_concept(name: str) -> DecideConcept:

    spec = T.SPECS[name]
    lp, jp = _deal(spec["positive"](), f"{name}+")
    ln, jn = _deal(spec["negative"](), f"{name}-")
    c = _concept(name, "promote", lp, ln, test_requests(), spec["description"])
    return DecideConcept(c, spec["kind"], jp, jn, {"kind": "instruction", "positive": spec["instruction"],
                                                   "negative": spec["opposite"]}, spec.get("lexicon"))


def test_concepts() -> list[DecideConcept]:
    """The 22 test concepts, in the order the run takes them (kinds interleaved)."""
    promote = [topic_concept(k, "promote") for k in PROMOTED_TOPICS]
    suppress = [topic_concept(k, "suppress") for k in SUPPRESSED_TOPICS]
    other = [templated_concept(n) for n in SPECS]
    out = []
    for row in itertools.zip_longest(other, promote, suppress):
        out += [c for c in row if c is not None]
    return out


def dev_concepts() -> list[DecideConcept]:
    """The dev concepts the learning rates are chosen on (never a test concept)."""
    return [topic_concept("people", "promote"), topic_concept("people", "suppress"),
            topic_concept("mathematics", "suppress"), topic_concept("everyday-life", "suppress")]


def file_concept(c, digest: str = "") -> DecideConcept:
    """A concept of a user's file as a benchmark concept (module docstring); refused when too small."""
    need = LEVER_TEXTS + ADMISSION_TEXTS + FILE_JUDGE_TEXTS
    short = [f"{len(v)} {k} texts" for k, v in (("positive", c.positive), ("negative", c.negative)) if len(v) < need]
    if short or len(c.prompts) < TEST_PROMPTS:
        got = ", ".join(short + ([f"{len(c.prompts)} prompts"] if len(c.prompts) < TEST_PROMPTS else []))
        raise GeosteerError(f"concept {c.name!r}: bench decide needs >= {need} positive and negative texts "
                            f"({LEVER_TEXTS} lever + {ADMISSION_TEXTS} admission + {FILE_JUDGE_TEXTS} judge) and "
                            f">= {TEST_PROMPTS} prompts (got {got})")
    sides = {}
    for side in ("positive", "negative"):
        ordered = sorted(set(getattr(c, side)), key=lambda t: _h("decide-file", c.name, side, t))
        sides[side] = (ordered[:LEVER_TEXTS], ordered[LEVER_TEXTS:LEVER_TEXTS + ADMISSION_TEXTS],
                       [_cut(t) for t in ordered[LEVER_TEXTS + ADMISSION_TEXTS:]])
    (lp, ap, jp), (ln, an, jn) = sides["positive"], sides["negative"]
    concept = _concept(c.name, c.direction, lp, ln, list(c.prompts[:TEST_PROMPTS]), c.description or c.name)
    return DecideConcept(concept, f"file-{c.direction}", jp, jn, {"kind": "texts", "positive": ap, "negative": an},
                         extra={"source": digest})


@lru_cache(maxsize=4)
def file_concepts(path: str) -> list[DecideConcept]:
    """The concepts of a geosteer concept file or an AxBench file, as benchmark concepts (one-line errors); a
    concept named like a dev concept is refused."""

    concepts = load_concepts(Path(path))  # a missing or malformed file: its one line
    clash = [c.name for c in concepts if c.name in DEV]
    if clash:
        raise GeosteerError(f"concept {clash[0]!r}: {', '.join(DEV)} are the names of the dev concepts the "
                            "learning rates are chosen on; rename the file's concept")
    digest = file_digest(path)
    return [file_concept(c, digest) for c in concepts]


def file_digest(path: str) -> str:
    """SHA-256 of a concept file's bytes (read by the bounded reader), or of the bundled file's name."""
    from geosteer.readers import read_bytes

    if path == "bundled" and not Path(path).exists():
        return hashlib.sha256(b"bundled").hexdigest()
    return hashlib.sha256(read_bytes(path, what="--concepts")).hexdigest()


def by_name(names: list[str] | None = None, concepts_file: str | None = None) -> list[DecideConcept]:
    """Test concepts by name (all of them when ``names`` is None); with ``concepts_file``, that file's concepts
    take the test concepts' place. A dev concept is never a test concept (:func:`dev_by_name`)."""
    tests = file_concepts(concepts_file) if concepts_file else test_concepts()
    every = {c.name: c for c in tests}
    if names is None:
        return tests
    bad = [n for n in names if n not in every]
    if bad:
        dev = f" ({bad[0]!r} is a dev concept, used only to choose the learning rates)" if bad[0] in DEV else ""
        shown = ", ".join(list(every)[:30]) + (", ..." if len(every) > 30 else "")
        raise GeosteerError(f"unknown concept {bad[0]!r}{dev}; valid test concepts: {shown}")
    return [every[n] for n in names]


def dev_by_name(name: str) -> DecideConcept:
    """The dev concept ``name`` (one of :data:`DEV`)."""
    found = [c for c in dev_concepts() if c.name == name]
    if not found:
        raise GeosteerError(f"unknown dev concept {name!r}; valid: {', '.join(DEV)}")
    return found[0]
