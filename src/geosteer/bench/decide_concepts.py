"""The concepts of the decisive steering benchmark: fixed pools, and what each seed draws from them.

Topic concepts come from the corpus's topics (:mod:`geosteer.data.corpus`, train split only): each topic's
articles are dealt once by title hash into a text pool (up to TOPIC_TEXT_POOL articles, what lever and judge texts
are drawn from) and a title pool (the rest, at least TITLE_RESERVE: its first ADMISSION_TITLES are the admission
titles, the others the titles "Tell me about <title>." a suppressed topic is tested on). Sentiment, register and
refusal texts are templated sentences (a subject, a clause and an ending combined); the neutral requests a
promoted concept is tested on are a bundled list (ADMISSION_PROMPTS of them kept for admission).

Each (concept, seed) draws from these pools (:mod:`geosteer.bench.decide_draw`, keyed by seed, concept name and
purpose): a topic's TOPIC_LEVER_TEXTS lever articles and JUDGE_TEXTS judge articles a side (disjoint; the
negatives from the other topics' pools, in turn), a templated concept's TEMPLATED_LEVER_TEXTS lever sentences a
side and JUDGE_TEXTS judge sentences, and TEST_PROMPTS test prompts. So a second seed redraws the lever texts, the
test prompts and the judge's training texts; the admission sets stay fixed.

Every concept has a judge set (:attr:`DecideConcept.judge_positive` / ``judge_negative``), an admission set
(the stock model's own continuations with known labels: topic titles, or one instruction against its
opposite) and TEST_PROMPTS test prompts that share no word 3-gram with the levers' training requests.

A user's concept file (geosteer's JSON or an AxBench file, :func:`file_concepts`) gives concepts of the same
shape, added to the bundled ones (:func:`run_concepts`): each side's ADMISSION_TEXTS held-out admission texts
dealt once by hash (the file's own labelled texts: no labelled continuations of the stock model exist for them),
and per seed LEVER_TEXTS lever texts drawn from the rest, the remainder (at least FILE_JUDGE_TEXTS) for the
judge; its test prompts are drawn from its prompts. A concept whose texts carry groups (format 2, e.g. the
answers to one request on both sides; an AxBench file's, by the input they answer) has whole groups held out:
groups are dealt once by hash until each side has ADMISSION_TEXTS texts in them, and no text of a held-out group
is a lever or judge text; and, per seed, no text answering a drawn test prompt (:mod:`.decide_requests`) is.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path

from geosteer.bench import decide_draw as D
from geosteer.bench import decide_requests as R
from geosteer.bench import decide_templates as T
from geosteer.bench.axbench import MAX_PARQUET_BYTES, load_concepts
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
TOPIC_TEXT_POOL = 320  # articles per topic that lever and judge texts are drawn from (a small topic: fewer)
TITLE_RESERVE = 32  # titles per topic at least (ADMISSION_TITLES for admission, the rest to draw test prompts)
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
    """topic key -> {"texts": articles, "titles": article titles}, train split, dealt once by title hash: the
    first min(TOPIC_TEXT_POOL, n - TITLE_RESERVE) articles are the text pool, the rest give titles."""
    out = {}
    for key, topic in TOPICS.items():
        arts = sorted((a for a in articles() if a.topic == topic and split_of(a.title) == "train"),
                      key=lambda a: _h("decide", topic, a.title))
        n = min(TOPIC_TEXT_POOL, len(arts) - TITLE_RESERVE)
        out[key] = {"texts": arts[:n], "titles": [a.title for a in arts[n:]]}
    return out


def _others(key: str, name: str, seed: int) -> list[str]:
    """The other topics' text pools, each in the (seed, concept) order, taken in turn (round robin)."""
    return [a.text for a in D.interleave([D.shuffled(topic_pools()[k]["texts"], seed, name, f"negative:{k}")
                                          for k in TOPICS if k != key])]


def test_titles(key: str, seed: int = 0, name: str | None = None) -> list[str]:
    """The titles a suppressed topic is tested on: TEST_PROMPTS drawn from its title pool (admission's left out)."""
    pool = topic_pools()[key]["titles"][ADMISSION_TITLES:]
    return D.draw(pool, TEST_PROMPTS, seed, name or f"no-{key}", "prompts")


def admission_titles(key: str) -> list[str]:
    return topic_pools()[key]["titles"][:ADMISSION_TITLES]


@lru_cache(maxsize=1)
def neutral_requests() -> tuple[str, ...]:
    """The bundled neutral requests: the ADMISSION_PROMPTS from TEST_PROMPTS on are admission's, the rest the
    pool test prompts are drawn from (:func:`request_pool`)."""
    return tuple(json.loads(resources.files("geosteer.data").joinpath("prompts", PROMPTS_FILE)
                            .read_text(encoding="utf-8")))


def request_pool() -> list[str]:
    """The neutral requests a promoted concept's test prompts are drawn from (admission's left out)."""
    every = neutral_requests()
    return list(every[:TEST_PROMPTS] + every[TEST_PROMPTS + ADMISSION_PROMPTS:])


def test_requests(seed: int = 0, name: str = "") -> list[str]:
    """TEST_PROMPTS neutral requests drawn for (seed, concept ``name``)."""
    return D.draw(request_pool(), TEST_PROMPTS, seed, name, "prompts")


def admission_requests() -> list[str]:
    return list(neutral_requests()[TEST_PROMPTS:TEST_PROMPTS + ADMISSION_PROMPTS])


def _concept(name: str, direction: str, positive: list[str], negative: list[str], prompts: list[str],
             description: str, instruction: str | None = None):
    return concept_from_dict({"name": name, "direction": direction, "positive": positive, "negative": negative,
                              "prompts": prompts, "description": description, "instruction": instruction})


def topic_concept(key: str, direction: str, seed: int = 0) -> DecideConcept:
    """A topic promoted on neutral requests, or suppressed ("no-<topic>") on requests about its own titles; its
    lever, judge and test draws are the seed's."""
    name = key if direction == "promote" else f"no-{key}"
    pool = topic_pools()[key]["texts"]
    own = D.shuffled(pool, seed, name, "positive")
    n = TOPIC_LEVER_TEXTS
    if len(own) < n + JUDGE_TEXTS:
        raise GeosteerError(f"topic {key!r}: {len(own)} articles; a concept draws {n} lever + {JUDGE_TEXTS} judge")
    others = _others(key, name, seed)
    prompts = (test_requests(seed, name) if direction == "promote"
               else [TITLE_PROMPT.format(t) for t in test_titles(key, seed, name)])
    c = _concept(name, direction, [a.text for a in own[:n]], others[:n], prompts, DESCRIPTIONS[key])
    pools = {"lever": [len(pool), len(others)], "judge": [len(pool) - n, len(others) - n],
             "prompts": len(request_pool()) if direction == "promote" else len(topic_pools()[key]["titles"])
             - ADMISSION_TITLES}
    return DecideConcept(c, f"topic-{direction}", [_cut(a.text) for a in own[n:n + JUDGE_TEXTS]],
                         [_cut(t) for t in others[n:n + 2 * JUDGE_TEXTS]], {"kind": "titles", "topic": key},
                         extra={"seed": seed, "pools": pools})


def templated_concept(name: str, seed: int = 0) -> DecideConcept:
    """A templated concept: per side, TEMPLATED_LEVER_TEXTS lever sentences and JUDGE_TEXTS judge sentences drawn
    for the seed (disjoint); test prompts drawn from the neutral requests."""
    spec = T.SPECS[name]
    sides = []
    for side, sign in (("positive", "+"), ("negative", "-")):
        pool = sorted(set(spec[side]()), key=lambda t, tag=f"{name}{sign}": _h("decide", tag, t))
        order = D.shuffled(pool, seed, name, side)
        sides.append((order[:TEMPLATED_LEVER_TEXTS], order[TEMPLATED_LEVER_TEXTS:TEMPLATED_LEVER_TEXTS + JUDGE_TEXTS],
                      len(pool)))
    (lp, jp, n_p), (ln, jn, n_n) = sides
    c = _concept(name, "promote", lp, ln, test_requests(seed, name), spec["description"])
    pools = {"lever": [n_p, n_n], "judge": [n_p - TEMPLATED_LEVER_TEXTS, n_n - TEMPLATED_LEVER_TEXTS],
             "prompts": len(request_pool())}
    return DecideConcept(c, spec["kind"], jp, jn, {"kind": "instruction", "positive": spec["instruction"],
                                                   "negative": spec["opposite"]}, spec.get("lexicon"),
                         extra={"seed": seed, "pools": pools})


def test_concepts(seed: int = 0) -> list[DecideConcept]:
    """The 22 test concepts as drawn for ``seed``, in the order the run takes them (kinds interleaved)."""
    promote = [topic_concept(k, "promote", seed) for k in PROMOTED_TOPICS]
    suppress = [topic_concept(k, "suppress", seed) for k in SUPPRESSED_TOPICS]
    other = [templated_concept(n, seed) for n in SPECS]
    out = []
    for row in itertools.zip_longest(other, promote, suppress):
        out += [c for c in row if c is not None]
    return out


def dev_concepts(seed: int = 0) -> list[DecideConcept]:
    """The dev concepts the learning rates are chosen on (never a test concept)."""
    return [topic_concept("people", "promote", seed), topic_concept("people", "suppress", seed),
            topic_concept("mathematics", "suppress", seed), topic_concept("everyday-life", "suppress", seed)]


def _too_small(c, what: str, drawn: int = TEST_PROMPTS) -> GeosteerError:
    need = LEVER_TEXTS + ADMISSION_TEXTS + FILE_JUDGE_TEXTS
    return GeosteerError(f"concept {c.name!r}: bench decide needs >= {need} positive and negative texts "
                         f"({LEVER_TEXTS} lever + {ADMISSION_TEXTS} admission + {FILE_JUDGE_TEXTS} judge) and "
                         f">= {drawn} prompts (got {what})")


def _held_groups(c) -> tuple[set[str], dict[str, int]]:
    """(the groups held out for admission, each group's rank): groups dealt once by hash, taken in turn until
    each side has ADMISSION_TEXTS texts in them."""
    g = c.groups
    order = sorted(set(g.positive) | set(g.negative), key=lambda x: _h("decide-file-group", c.name, x))
    held, n_pos, n_neg = set(), 0, 0
    for x in order:
        if min(n_pos, n_neg) >= ADMISSION_TEXTS:
            break
        held.add(x)
        n_pos, n_neg = n_pos + g.positive.count(x), n_neg + g.negative.count(x)
    return held, {x: i for i, x in enumerate(order)}


def _split(c, side: str, held: set[str] | None, rank: dict[str, int]) -> tuple[list[str], list[str]]:
    """(a side's admission texts, the rest in its fixed order): the first ADMISSION_TEXTS by hash, or, for a
    grouped concept, the first ADMISSION_TEXTS of the held-out groups (their other texts left unused) and the
    texts of the other groups."""
    texts = getattr(c, side)
    key = lambda t, s=side: _h("decide-file", c.name, s, t)  # noqa: E731
    if held is None:
        ordered = sorted(set(texts), key=key)
        return ordered[:ADMISSION_TEXTS], ordered[ADMISSION_TEXTS:]
    ids = dict(zip(texts, getattr(c.groups, side), strict=True))
    adm = sorted((t for t in texts if ids[t] in held), key=lambda t: (rank[ids[t]], key(t)))
    return adm[:ADMISSION_TEXTS], sorted((t for t in texts if ids[t] not in held), key=key)


def file_concept(c, digest: str = "", seed: int = 0, drawn: int = TEST_PROMPTS) -> DecideConcept:
    """A concept of a user's file as a benchmark concept drawn for ``seed`` (module docstring; ``drawn``: the test
    prompts a seed draws, the design's ``test_prompts``); refused when too small."""
    need = LEVER_TEXTS + ADMISSION_TEXTS + FILE_JUDGE_TEXTS
    short = [f"{len(v)} {k} texts" for k, v in (("positive", c.positive), ("negative", c.negative)) if len(v) < need]
    if short or len(c.prompts) < drawn:
        raise _too_small(c, ", ".join(short + ([f"{len(c.prompts)} prompts"] if len(c.prompts) < drawn
                                               else [])), drawn)
    held, rank = _held_groups(c) if getattr(c, "groups", None) is not None else (None, {})
    prompts = D.draw(list(c.prompts), drawn, seed, c.name, "prompts")
    split = {side: _split(c, side, held, rank) for side in ("positive", "negative")}
    for side, (adm, ordered) in split.items():
        if len(adm) < ADMISSION_TEXTS or len(ordered) < LEVER_TEXTS + FILE_JUDGE_TEXTS:
            raise _too_small(c, f"{len(adm)} {side} admission texts in the held-out groups and {len(ordered)} "
                                "in the others")
    tested = set()
    if held is not None:  # the test prompts' requests held out: the others' texts suffice whatever is drawn
        R.check_requests(c, held, drawn, LEVER_TEXTS + FILE_JUDGE_TEXTS,
                         f"{LEVER_TEXTS} lever + {FILE_JUDGE_TEXTS} judge")
        tested = R.tested_requests(c, prompts) - held  # (an admission request's texts are out already)
    sides, sizes = {}, []
    for side, (adm, ordered) in split.items():
        rest = D.shuffled(ordered, seed, c.name, side)
        rest = R.without(rest, c, side, tested) if tested else rest
        sides[side] = (rest[:LEVER_TEXTS], adm, [_cut(t) for t in rest[LEVER_TEXTS:]])
        sizes.append(len(rest))
    (lp, ap, jp), (ln, an, jn) = sides["positive"], sides["negative"]
    concept = _concept(c.name, c.direction, lp, ln, prompts, c.description or c.name, c.instruction)
    pools = {"lever": sizes, "judge": [n - LEVER_TEXTS for n in sizes], "prompts": len(c.prompts)}
    if held is not None:
        pools["admission_groups"] = len(held)
        pools["test_requests"] = len(tested)
    return DecideConcept(concept, f"file-{c.direction}", jp, jn, {"kind": "texts", "positive": ap, "negative": an},
                         extra={"source": digest, "seed": seed, "pools": pools})


def _file_rows(path: str) -> tuple[list, str]:
    """(the concepts of a file, its SHA-256), a concept named like a dev concept refused. The file's bytes are
    read on every call and its parse reused only for the same name with the same bytes (the same relative name
    in another folder, or a file rewritten in place, is parsed afresh)."""
    digest = file_digest(path)  # a missing file, a folder, a FIFO or a device: its one line
    return _parsed(path, digest), digest


@lru_cache(maxsize=4)
def _parsed(path: str, digest: str) -> list:
    """The concepts of the file ``path`` whose bytes hash to ``digest`` (a parse depends on both only)."""
    concepts = load_concepts(Path(path))  # a malformed file: its one line
    clash = [c.name for c in concepts if c.name in DEV]
    if clash:
        raise GeosteerError(f"concept {clash[0]!r}: {', '.join(DEV)} are the names of the dev concepts the "
                            "learning rates are chosen on; rename the file's concept")
    return concepts


def file_concepts(path: str, seed: int = 0, drawn: int = TEST_PROMPTS) -> list[DecideConcept]:
    """The concepts of a geosteer concept file or an AxBench file, as benchmark concepts drawn for ``seed``, each
    with ``drawn`` test prompts (one-line errors); a concept named like a dev concept is refused."""
    concepts, digest = _file_rows(path)
    return [file_concept(c, digest, seed, drawn) for c in concepts]


def file_digest(path: str) -> str:
    """SHA-256 of a concept file's bytes (streamed; as large as an AxBench parquet file), or of "bundled"."""
    from geosteer.readers import sha256_file

    if path == "bundled" and not Path(path).exists():
        return hashlib.sha256(b"bundled").hexdigest()
    return sha256_file(path, what="--concepts", limit=MAX_PARQUET_BYTES)


def grouped(path: str, every: bool = True) -> bool:
    """Whether every (``every`` False: some) concept of the file groups its texts (format 2's ``groups``)."""
    return (all if every else any)(getattr(c, "groups", None) is not None for c in _file_rows(path)[0])


def tested_line(path: str) -> str:
    """What a grouped file's test prompts hold out (:func:`geosteer.bench.decide_requests.tested_line`)."""
    return R.tested_line(_file_rows(path)[0])


def identity(concepts_file: str | None = None, bundled: bool = True) -> dict:
    """What a run folder records of its concepts: the bundled set (byte for byte what runs without a file
    recorded), a file's source and SHA-256 alone, or the bundled set with the file's under ``file``."""
    own = {"source": "bundled", "sha256": file_digest("bundled")}
    if concepts_file is None:
        return own
    doc = {"source": str(concepts_file), "sha256": file_digest(str(concepts_file))}
    return {**own, "file": doc} if bundled else doc


def run_concepts(concepts_file: str | None = None, seed: int = 0, bundled: bool = True,
                 drawn: int = TEST_PROMPTS) -> list[DecideConcept]:
    """A run's test concepts drawn for ``seed``: the bundled ones, a file's alone (``bundled`` False), or the
    bundled ones with a file's added (a file's concept named like a bundled one takes its place); a file's
    concepts draw ``drawn`` test prompts a seed."""
    if not concepts_file:
        return test_concepts(seed)
    own = file_concepts(concepts_file, seed, drawn)
    if not bundled:
        return own
    mine, bundled_set = {c.name: c for c in own}, test_concepts(seed)
    taken = {c.name for c in bundled_set}
    return [mine.get(c.name, c) for c in bundled_set] + [c for c in own if c.name not in taken]


def by_name(names: list[str] | None = None, concepts_file: str | None = None, seed: int = 0,
            bundled: bool = True, drawn: int = TEST_PROMPTS) -> list[DecideConcept]:
    """Test concepts by name (all of them when ``names`` is None), drawn for ``seed``, of
    :func:`run_concepts`. A dev concept is never a test concept (:func:`dev_by_name`)."""
    tests = run_concepts(concepts_file, seed, bundled, drawn)
    every = {c.name: c for c in tests}
    if names is None:
        return tests
    bad = [n for n in names if n not in every]
    if bad:
        dev = f" ({bad[0]!r} is a dev concept, used only to choose the learning rates)" if bad[0] in DEV else ""
        shown = ", ".join(list(every)[:30]) + (", ..." if len(every) > 30 else "")
        raise GeosteerError(f"unknown concept {bad[0]!r}{dev}; valid test concepts: {shown}")
    return [every[n] for n in names]


def dev_by_name(name: str, seed: int = 0) -> DecideConcept:
    """The dev concept ``name`` (one of :data:`DEV`), drawn for ``seed``."""
    found = [c for c in dev_concepts(seed) if c.name == name]
    if not found:
        raise GeosteerError(f"unknown dev concept {name!r}; valid: {', '.join(DEV)}")
    return found[0]


def pool_record(drawn: int = TEST_PROMPTS) -> dict:
    """The pools the seeds draw from, their sizes, for the run's record (:func:`geosteer.bench.decide_draw.record`;
    ``drawn``: the test prompts a file's concept draws)."""
    return {"topic_texts": f"up to {TOPIC_TEXT_POOL} articles per topic ({TOPIC_LEVER_TEXTS} lever + "
                           f"{JUDGE_TEXTS} judge drawn a side; negatives from the other topics in turn)",
            "topic_titles": f"at least {TITLE_RESERVE - ADMISSION_TITLES} titles per topic after the "
                            f"{ADMISSION_TITLES} admission titles ({TEST_PROMPTS} drawn)",
            "neutral_requests": f"{len(request_pool())} requests ({TEST_PROMPTS} drawn; {ADMISSION_PROMPTS} more "
                                "kept for admission)",
            "templated": f"every templated sentence a side, >= 300 ({TEMPLATED_LEVER_TEXTS} lever + "
                         f"{JUDGE_TEXTS} judge drawn)",
            "file": f"a side's texts after its {ADMISSION_TEXTS} admission texts ({LEVER_TEXTS} lever drawn, the "
                    f"rest judge); the file's prompts ({drawn} drawn)"}
