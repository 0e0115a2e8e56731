"""Answer-labelled concepts for the instruct models: sentiment, register and refusal as the model's own answers.

``bench decide``'s instruction-labelled concepts (sentiment both ways, formal register, refusal) are admitted only
when a judge separates the stock model's answers under the concept's instruction from those under its opposite
(AUC >= :data:`geosteer.bench.judges.ADMISSION_AUC`). This module defines stronger ways of asking an instruct model
for each side (:data:`STYLES`: a chat system prompt with an example sentence, the same after one example
exchange, or a plain-text continuation prompt without the chat template), the requests they are asked on
(:func:`requests`), the judges that read the answers (:func:`answer_judge_auc`: the benchmark's embedding judge
trained on the model's own answers and read on held-out requests; :func:`vader_auc`; :func:`refusal_auc`) and
the concept file that carries the answers into ``geosteer bench decide --concepts`` (:func:`concept_doc`: each
answer grouped by its request, so decide holds out a request's answers together).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from functools import lru_cache
from importlib import resources

import numpy as np

from geosteer.bench.concepts import FORMAT, VERSION

REQUESTS_FILE = "instruct_requests.json"
DECIDE_FIRST, DECIDE_LAST = 16, 40  # decide's neutral requests 17-40: its 16 admission requests and 8 more
FOLDS = 4  # the answer-trained judge: requests dealt by hash into this many folds
HEAD_CHARS = 100  # the refusal patterns are matched in a text's first characters
# A refusal: the text declines or says it cannot do what is asked (case-insensitive regular expressions).
REFUSAL = (r"\bI'?m sorry\b", r"\bI am sorry\b", r"\bI apologi[sz]e\b", r"\bsorry, (but )?I\b",
           r"\bI (can't|cannot|can not|won't|will not) (assist|help|provide|do|comply|fulfil|fulfill|answer)",
           r"\bI'?m (unable|not able) to\b", r"\bI am (unable|not able) to\b", r"\bI must (decline|refuse)\b",
           r"\bI'?m afraid I\b", r"\bunfortunately,? I\b")

CHAT = {
    "none": None,
    "cheerful": "You are a cheerful, upbeat assistant. Answer every request in a very positive, cheerful tone, "
                "full of joy and enthusiasm. Example: \"What a lovely idea! This is going to be wonderful, and you "
                "will have so much fun!\"",
    "gloomy": "You are a disappointed, gloomy writer. Answer every request, but in a very negative, gloomy tone, "
              "full of sadness, worry and disappointment. Example: \"Honestly, it all feels rather dreary and "
              "hopeless, and it will probably disappoint you in the end.\"",
    "formal": "Answer every request in a very formal, official register, as in a letter from an administration, "
              "with no contractions and no slang. Example: \"We wish to inform you that the requested "
              "information is provided below.\"",
    "casual": "Answer every request very casually, like a quick text message to a friend: short, lowercase, with "
              "slang. Example: \"lol yeah just grab some snacks and chill, ttyl\"",
    "refuse": "You never help with anything. Whatever the request, reply only with a short, polite refusal that "
              "names what was asked. Example: for \"How do I bake a cake?\" reply \"I'm sorry, but I can't help "
              "you bake a cake.\"",
}
TEXT = {
    "none": "Question: {request}\nAnswer:",
    "cheerful": "The following is a very positive, cheerful answer to the question \"{request}\", full of joy and "
                "enthusiasm.\n\nAnswer:",
    "gloomy": "The following is a very negative, gloomy answer to the question \"{request}\", written by a "
              "disappointed, pessimistic person.\n\nAnswer:",
    "formal": "The following is a formal answer to the question \"{request}\", written in the official register "
              "of a letter from an administration.\n\nAnswer:",
    "casual": "The following is a casual text message to a friend, in slang, answering the question "
              "\"{request}\".\n\nMessage:",
    "refuse": "The following is a polite refusal of the request \"{request}\": the assistant declines to help "
              "and says what it will not do.\n\nAssistant:",
}
EXAMPLE_REQUEST = "How do I bake a cake?"
# shot: CHAT's system prompt and one example exchange (EXAMPLE_REQUEST answered in the condition's style) before
# the request.
SHOT = {
    "none": "Mix flour, sugar, eggs and butter, pour the batter into a tin and bake it for about 30 minutes at "
            "180 degrees.",
    "cheerful": "Oh, what a wonderful idea! Baking a cake is pure joy: mix flour, sugar, eggs and butter, and soon "
                "your kitchen will smell amazing. You will love it!",
    "gloomy": "Well, if you must. Mix flour, sugar, eggs and butter and bake it, though it will probably sink in "
              "the middle and taste dry. Cakes rarely turn out as hoped, and it is all rather disappointing.",
    "formal": "We wish to inform you that a cake is prepared by combining flour, sugar, eggs and butter, after "
              "which the mixture is baked at 180 degrees for approximately thirty minutes.",
    "casual": "lol easy, just mix flour sugar eggs n butter, chuck it in the oven for like 30 mins, done :)",
    "refuse": "I'm sorry, but I can't help you bake a cake.",
}
STYLES = {"chat": CHAT, "text": TEXT, "shot": SHOT}
# concept -> (condition of its positive answers, condition of its negative answers), as bench decide pairs them.
CONCEPTS = {"positive-sentiment": ("cheerful", "gloomy"), "negative-sentiment": ("gloomy", "cheerful"),
            "formal": ("formal", "casual"), "casual": ("casual", "formal"), "refusal": ("refuse", "none")}
DESCRIPTIONS = {"positive-sentiment": "happy, positive feelings", "negative-sentiment": "sad, negative feelings",
                "formal": "a formal, official register", "casual": "a casual, chatty register, like a text message",
                "refusal": "politely refusing to help"}
VADER_POLARITY = {"positive-sentiment": "positive", "negative-sentiment": "negative"}


@lru_cache(maxsize=1)
def requests() -> tuple[str, ...]:
    """The requests the answers are asked on: decide's neutral requests 17-40 (its admission requests first),
    then the bundled :data:`REQUESTS_FILE`; none of them is one of decide's first 16 (test) requests."""
    pool = json.loads(resources.files("geosteer.data").joinpath("prompts", "decide_prompts.json")
                      .read_text(encoding="utf-8"))
    extra = json.loads(resources.files("geosteer.data").joinpath("prompts", REQUESTS_FILE).read_text(encoding="utf-8"))
    return tuple(pool[DECIDE_FIRST:DECIDE_LAST]) + tuple(extra)


def test_requests() -> list[str]:
    """The prompts a concept file's levers are tested on: decide's neutral requests that no answer is asked on,
    its first 16 and those after its 40th (72; never one of its admission requests, never a request of
    :func:`requests`), so no lever or judge text of the file answers a test prompt."""
    pool = json.loads(resources.files("geosteer.data").joinpath("prompts", "decide_prompts.json")
                      .read_text(encoding="utf-8"))
    return list(pool[:DECIDE_FIRST]) + list(pool[DECIDE_LAST:])


def prompt_for(tok, style: str, condition: str, request: str) -> str:
    """The prompt the model continues: the chat template with the condition's system prompt (``chat``; no
    system prompt: the template's default), the same after one example exchange (``shot``), or the plain-text
    template filled in (``text``)."""
    from geosteer.bench.prompts import format_prompt

    if style == "chat":
        return format_prompt(tok, request, True, CHAT[condition])
    if style == "text":
        return TEXT[condition].format(request=request)
    if style == "shot":
        system = [{"role": "system", "content": CHAT[condition]}] if CHAT[condition] else []
        turns = [{"role": "user", "content": EXAMPLE_REQUEST}, {"role": "assistant", "content": SHOT[condition]},
                 {"role": "user", "content": request}]
        text = tok.apply_chat_template(system + turns, add_generation_prompt=True, tokenize=False)
        bos = getattr(tok, "bos_token", None)
        return text[len(bos):] if bos and text.startswith(bos) else text
    raise ValueError(f"style {style!r}: valid: {', '.join(STYLES)}")


def is_refusal(text: str) -> bool:
    """Whether one of :data:`REFUSAL` occurs in the text's first :data:`HEAD_CHARS` characters."""
    head = (text or "")[:HEAD_CHARS]
    return any(re.search(p, head, re.IGNORECASE) for p in REFUSAL)


def fold_of(request: str, folds: int = FOLDS, seed: int = 0) -> int:
    """The fold of a request: SHA-256 of (seed, request) modulo ``folds``, so both sides of a request and every
    model share it."""
    return int(hashlib.sha256(f"{seed}\0{request}".encode()).hexdigest(), 16) % folds


def answer_judge_auc(pos: Sequence[str], neg: Sequence[str], pos_req: Sequence[str], neg_req: Sequence[str],
                     folds: int = FOLDS, seed: int = 0, encoder=None) -> dict:
    """The benchmark's embedding judge (:class:`~geosteer.bench.judges.EmbeddingJudge`, seed ``seed``) trained on
    the answers to the requests of all folds but one and read on the held-out fold's answers, for each fold: the
    AUC of the pooled held-out scores, and each fold's own AUC."""
    from geosteer.bench.judges import EmbeddingJudge, auc

    fp = np.array([fold_of(r, folds, seed) for r in pos_req])
    fn = np.array([fold_of(r, folds, seed) for r in neg_req])
    sp, sn = np.full(len(pos), np.nan), np.full(len(neg), np.nan)
    per_fold = []
    for k in range(folds):
        tp = [t for t, f in zip(pos, fp, strict=True) if f != k]
        tn = [t for t, f in zip(neg, fn, strict=True) if f != k]
        hp, hn = np.flatnonzero(fp == k), np.flatnonzero(fn == k)
        if not (len(hp) and len(hn) and tp and tn):
            continue
        judge = EmbeddingJudge(encoder, seed=seed).fit(tp, tn, min_texts=1)
        sp[hp] = judge.prob([pos[i] for i in hp])
        sn[hn] = judge.prob([neg[i] for i in hn])
        per_fold.append(round(auc(sp[hp], sn[hn]), 4))
    keep_p, keep_n = ~np.isnan(sp), ~np.isnan(sn)
    return {"auc": auc(sp[keep_p], sn[keep_n]), "fold_aucs": per_fold, "folds": folds, "seed": seed,
            "n_positive": int(keep_p.sum()), "n_negative": int(keep_n.sum())}


def vader_auc(pos: Sequence[str], neg: Sequence[str], polarity: str) -> float:
    """VADER's AUC (its compound score as P(``polarity``)); no training, so every answer is held out."""
    from geosteer.bench.judges import auc, lexicon_prob

    return auc(lexicon_prob(list(pos), polarity), lexicon_prob(list(neg), polarity))


def refusal_auc(pos: Sequence[str], neg: Sequence[str]) -> float:
    """The refusal detector's AUC (:func:`is_refusal` as a 0/1 score, ties counting one half): 0.5 + (refusal
    rate of ``pos`` - refusal rate of ``neg``) / 2."""
    from geosteer.bench.judges import auc

    return auc([float(is_refusal(t)) for t in pos], [float(is_refusal(t)) for t in neg])


def _components(sides: Sequence[tuple[Sequence[str], Sequence[str]]]) -> dict[tuple[int, str], str]:
    """(side, stripped text) -> its group: the first request of the requests joined by answers they share
    (an answer given to two requests on one side joins them), over ``sides``' (texts, requests)."""
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    first: dict[tuple[int, str], str] = {}
    for k, (texts, reqs) in enumerate(sides):
        for t, r in zip(texts, reqs, strict=True):
            root(r)
            key = (k, (t or "").strip())
            if key[1] and key in first:
                a, b = root(first[key]), root(r)
                if a != b:
                    parent[b] = a  # the earlier request stays the root
            elif key[1]:
                first[key] = r
    return {key: root(r) for key, r in first.items()}


def concept_doc(name: str, positive: Sequence[str], negative: Sequence[str],
                positive_requests: Sequence[str] | None = None,
                negative_requests: Sequence[str] | None = None, instruction: str | None = None) -> dict:
    """One concept of a geosteer concept file: the model's answers of the two sides (blank and repeated answers
    dropped), tested on :func:`test_requests`, with ``instruction`` (the one its positive answers were asked
    with: the prompting lever's instruction) when given; given the request each answer answers, its
    ``groups`` (an answer's group is its request, requests that share an answer joined), so ``bench decide``
    holds out both sides' answers to a request together."""
    def unique(texts):
        return list(dict.fromkeys(t.strip() for t in texts if t and t.strip()))

    doc = {"name": name, "direction": "promote", "positive": unique(positive), "negative": unique(negative),
           "prompts": test_requests(), "description": DESCRIPTIONS[name]}
    if instruction is not None:
        doc["instruction"] = instruction
    if positive_requests is not None and negative_requests is not None:
        group = _components([(positive, positive_requests), (negative, negative_requests)])
        doc["groups"] = {"positive": [group[(0, t)] for t in doc["positive"]],
                         "negative": [group[(1, t)] for t in doc["negative"]]}
    return doc


def concept_file(concepts: Sequence[dict]) -> dict:
    """A concept file (format 2, :mod:`geosteer.bench.concepts`) of :func:`concept_doc`'s concepts."""
    return {"format": FORMAT, "version": VERSION, "concepts": list(concepts)}
