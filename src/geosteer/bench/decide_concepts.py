"""The concepts of the decisive steering benchmark, built deterministically from the bundled corpus and templates.

Topic concepts come from the corpus's topics (:mod:`geosteer.data.corpus`, train split only): each topic's
articles are dealt by title hash into a lever pool (what the levers learn from), a judge pool (>= 200 texts a
side, disjoint from the levers') and a title pool (the prompts "Tell me about <title>." that a suppressed topic is
tested on, and the admission prompts). Sentiment, register and refusal texts are templated sentences (a
subject, a clause and an ending combined), again dealt into disjoint lever and judge pools.

Every concept has a judge set (:attr:`DecideConcept.judge_positive` / ``judge_negative``), an admission set
(the stock model's own continuations with known labels: topic titles, or one instruction against its
opposite) and >= 16 test prompts that share no word 3-gram with the levers' training requests.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

from geosteer.bench import decide_templates as T
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
DEV = ("people", "no-people")
LEVER_TEXTS = 8  # per side
JUDGE_TEXTS = 200  # per side (negatives: twice as many, spread over the other topics)
JUDGE_WORDS = 40  # judge texts are cut to about a continuation's length
TEST_PROMPTS = 16
ADMISSION_TITLES = 10  # per topic
ADMISSION_PROMPTS = 16  # per instruction-labelled concept
TITLE_PROMPT = "Tell me about {}."
PROMPTS_FILE = "decide_prompts.json"


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
    the first LEVER_TEXTS to the levers, the next JUDGE_TEXTS to the judge, the rest give titles."""
    out = {}
    for key, topic in TOPICS.items():
        arts = sorted((a for a in articles() if a.topic == topic and split_of(a.title) == "train"),
                      key=lambda a: _h("decide", topic, a.title))
        out[key] = {"lever": arts[:LEVER_TEXTS], "judge": arts[LEVER_TEXTS:LEVER_TEXTS + JUDGE_TEXTS],
                    "titles": [a.title for a in arts[LEVER_TEXTS + JUDGE_TEXTS:]]}
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
    neg = _others(key, "lever", LEVER_TEXTS)
    prompts = test_requests() if direction == "promote" else [TITLE_PROMPT.format(t) for t in test_titles(key)]
    name = key if direction == "promote" else f"no-{key}"
    c = _concept(name, direction, pos, neg, prompts, DESCRIPTIONS[key])
    return DecideConcept(c, f"topic-{direction}", [_cut(a.text) for a in pool["judge"]],
                         [_cut(t) for t in _others(key, "judge", 2 * JUDGE_TEXTS)],
                         {"kind": "titles", "topic": key})


def _deal(texts: list[str], tag: str) -> tuple[list[str], list[str]]:
    """(lever texts, judge texts) of one templated side."""
    ordered = sorted(set(texts), key=lambda t: _h("decide", tag, t))
    return ordered[:LEVER_TEXTS], ordered[LEVER_TEXTS:]


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
    return [topic_concept("people", "promote"), topic_concept("people", "suppress")]


def by_name(names: list[str] | None = None) -> list[DecideConcept]:
    """Test and dev concepts by name (all test concepts when ``names`` is None)."""
    every = {c.name: c for c in test_concepts() + dev_concepts()}
    if names is None:
        return test_concepts()
    bad = [n for n in names if n not in every]
    if bad:
        raise GeosteerError(f"unknown concept {bad[0]!r}; valid: {', '.join(every)}")
    return [every[n] for n in names]
