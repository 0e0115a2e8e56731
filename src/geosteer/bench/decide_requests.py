"""The requests of a concept file whose texts are grouped by request, and the test prompts held out with theirs.

A grouped concept (format 2's ``groups``; an AxBench file's, by the ``input`` each output answers) names each
text's request. A prompt that is also a group id is that request's prompt: its texts answer the very prompt the
steered model is tested on. ``bench decide`` draws a concept's test prompts for each seed and keeps the texts of
the requests they name out of that seed's lever and judge texts (:func:`tested_requests`), so no lever or judge
was trained on an answer to a request it is tested on. A prompt that names no group (a request no text answers)
holds nothing out. Whether a concept has requests enough for that is checked once, for the worst draw
(:func:`check_requests`): whichever test prompts a seed draws, the other requests still give the lever and judge
texts.
"""

from __future__ import annotations

import math
from collections import Counter

from geosteer.errors import GeosteerError

SIDES = ("positive", "negative")


def text_requests(c) -> set[str]:
    """The requests a grouped concept's texts answer (its group ids)."""
    return set(c.groups.positive) | set(c.groups.negative)


def requests(c) -> int:
    """How many requests a grouped concept has: those its texts answer and those only its prompts name."""
    return len(text_requests(c) | set(c.prompts))


def tested_requests(c, prompts: list[str]) -> set[str]:
    """The requests of the drawn test ``prompts`` that texts of the grouped concept ``c`` answer (held out)."""
    return set(prompts) & text_requests(c)


def without(texts: list[str], c, side: str, held: set[str]) -> list[str]:
    """``texts`` of ``side`` (in their order) less those answering a request in ``held``."""
    ids = dict(zip(getattr(c, side), getattr(c.groups, side), strict=True))
    return [t for t in texts if ids[t] not in held]


def check_requests(c, admission: set[str], test_prompts: int, need: int, what: str) -> None:
    """Refuse, in one line, a grouped concept whose worst draw leaves fewer than ``need`` lever and judge texts a
    side: the ``test_prompts`` prompts whose requests hold the most texts of a side drawn, and those requests and
    the ``admission`` ones held out. ``what``: the breakdown of ``need`` the message names."""
    counts = {s: Counter(getattr(c.groups, s)) for s in SIDES}
    named = [p for p in dict.fromkeys(c.prompts) if p in text_requests(c) and p not in admission]
    short = []
    for side in SIDES:
        free = {g: n for g, n in counts[side].items() if g not in admission}
        worst = sum(sorted((free.get(p, 0) for p in named), reverse=True)[:test_prompts])
        left = sum(free.values()) - worst
        if left < need:
            per = sum(free.values()) / max(1, len(free))  # texts a request, over the requests that have some
            short.append((need - left, left, side, per))
    if not short:
        return
    deficit, left, side, per = max(short)
    have = requests(c)
    more = math.ceil(deficit / per) if per > 0 else deficit
    raise GeosteerError(
        f"concept {c.name!r}: {have} requests, about {have + more} needed: holding out its {test_prompts} test "
        f"prompts' requests ({len(named)} of its prompts are requests lever and judge texts could answer) and its "
        f"{len(admission)} admission requests can leave {left} {side} texts ({per:.2g} a request), and the levers "
        f"and the judge need {need} a side ({what}); give it more requests, or prompts no text answers")


def tested_line(concepts: list) -> str:
    """What the dry run says of a grouped file's test prompts: how many of its prompts are requests its texts
    answer (their texts held out of the lever and judge texts of each seed that draws them)."""
    named = sum(len(set(c.prompts) & text_requests(c)) for c in concepts)
    prompts = sum(len(c.prompts) for c in concepts)
    many = "concept" if len(concepts) == 1 else "concepts"
    return (f"{named} of the {prompts} prompts of its {len(concepts)} {many} are requests its texts answer: a seed's "
            "test prompts' requests are held out of its lever and judge texts")
