"""One (concept, seed) of the decisive benchmark: its judge and admission, the stock model, every lever at matched KL.

The context of a (concept, seed) is the judge trained on its judge texts, the judge's admission on the stock
model's own labelled continuations (:mod:`geosteer.bench.decide_concepts`), the keyword-stuffing probe and the
stock model's readings of the test prompts. Each lever is then built (trained at its chosen learning rate),
its strength bisected to each control-KL level (:mod:`geosteer.bench.kl_match`), and its continuations at
each level read (:mod:`geosteer.bench.decide_score`). Each file is written when done, so a killed run
resumes where it stopped: ``<out>/units/<concept>/s<seed>/{context,<lever>}.json``.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from geosteer.bench import decide_score as S
from geosteer.bench.decide_concepts import (
    FILE_JUDGE_TEXTS,
    TITLE_PROMPT,
    TOPICS,
    admission_requests,
    admission_titles,
)
from geosteer.bench.decide_folder import read_sealed, write_sealed
from geosteer.bench.judges import (
    LEXICONS,
    MIN_JUDGE_TEXTS,
    EmbeddingJudge,
    admission,
    auc,
    discriminative_words,
    keyword_probe,
    lexicon_prob,
)
from geosteer.bench.kl_match import level_key, match_levels
from geosteer.bench.matched import LEARNED, build
from geosteer.bench.prompts import neutral_prompts, train_prompts
from geosteer.bench.registry import Point, Setup, stock_point
from geosteer.bench.scoring import next_token_logprobs

VERSION = 2  # raised when what a unit computes changes (its files are then measured again); 2: seeds redraw
# the lever texts, test prompts and judge texts, and admission records the judge's scores
KL_TOL = 0.1  # relative tolerance of the KL bisection
S_MAX = 64.0
MAX_EVALS = 10  # fresh control-KL evaluations per level
LEVERS = ("prompting", "caa", *LEARNED, "walls")  # the matched levers (walls: on suppressed concepts)
STRENGTH_RANGE = (0.5, 2.0)  # a matched strength outside it reads a lever far from what it was trained to


def in_range(strength: float) -> bool:
    """Whether a matched strength is within :data:`STRENGTH_RANGE`."""
    return STRENGTH_RANGE[0] <= float(strength) <= STRENGTH_RANGE[1]


def _write(path: Path, doc: dict) -> None:
    write_sealed(path, doc)


def _read(path: Path, fingerprint: dict) -> dict | None:
    """The sealed file ``path`` when it was measured with ``fingerprint``; None when it is missing or was
    measured otherwise; a changed or unreadable file is refused (:func:`decide_folder.read_sealed`)."""
    if not path.exists() and not path.is_symlink():
        return None
    doc = read_sealed(path)
    return doc if doc.get("fingerprint") == json.loads(json.dumps(fingerprint)) else None  # tuples read as lists


def controls(design) -> list[str]:

    return list(neutral_prompts()[1][: design.control_prompts])


def _titles_admission(r: S.Readers, out: Path, design) -> dict:
    """topic -> the stock model's continuations of "Tell me about <title>." for its admission titles (cached)."""
    path = out / "admission_titles.json"
    fp = {"version": VERSION, "new_tokens": design.new_tokens}
    doc = _read(path, fp)
    if doc is None:
        conts = {k: S.generate(r, stock_point(), [TITLE_PROMPT.format(t) for t in admission_titles(k)],
                               design.new_tokens).texts for k in TOPICS}
        doc = {"fingerprint": fp, "continuations": conts}
        _write(path, doc)
    return doc["continuations"]


def instructed(r: S.Readers, prompts: list[str], instruction: str | None, new_tokens: int) -> list[str]:
    """The stock model's greedy continuations of ``prompts`` with ``instruction`` as the system prompt."""
    point = Point("instructed", 1.0, {}, stock_point().interventions, instruction=instruction)
    return S.generate(r, point, prompts, new_tokens).texts


def _admission_texts(r: S.Readers, dc, out: Path, design) -> tuple[list[str], list[str]]:
    """(labelled-positive, labelled-negative) stock continuations of the concept's admission set."""
    a = dc.admission
    if a["kind"] == "texts":
        return list(a["positive"]), list(a["negative"])
    if a["kind"] == "titles":
        conts = _titles_admission(r, out, design)
        pos = conts[a["topic"]]
        neg = [t for k, v in conts.items() if k != a["topic"] for t in v]
        return pos, neg
    prompts = admission_requests()
    return (instructed(r, prompts, a["positive"], design.new_tokens),
            instructed(r, prompts, a["negative"], design.new_tokens))


def keyword_check(probe_judge_p: float, on_topic: Sequence[float]) -> dict:
    """The keyword probe judged on the concept score alone: the judge's P(concept) of the bare word list against
    its median P on genuine on-topic text (the admission's labelled-positive continuations). The judge passes
    when the list scores below that median and fails (a word list games it) otherwise; None without on-topic
    scores."""
    median = float(np.median(np.asarray(on_topic, np.float64))) if len(on_topic) else None
    return {"judge_p": float(probe_judge_p), "on_topic_judge_p": median,
            "passed": None if median is None else bool(float(probe_judge_p) < median)}


def judge_digest(dc) -> str:
    """SHA-256 of the texts a concept's judge is trained on (a seed's draw of them)."""
    body = json.dumps([list(dc.judge_positive), list(dc.judge_negative)], ensure_ascii=False)
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def build_context(r: S.Readers, dc, seed: int, out: Path, design) -> dict:
    """The (concept, seed)'s judge, admission, keyword probe and stock readings (module docstring)."""
    t0, c0 = time.perf_counter(), time.process_time()
    least = FILE_JUDGE_TEXTS if dc.extra.get("source") else MIN_JUDGE_TEXTS  # a file's concept: its own minimum
    judge = EmbeddingJudge(r.encoder, seed=seed).fit(dc.judge_positive, dc.judge_negative, least)
    pos, neg = _admission_texts(r, dc, out, design)
    pos_p, neg_p = judge.prob(pos), judge.prob(neg)
    adm = admission(pos_p, neg_p)
    adm["positive_scores"], adm["negative_scores"] = pos_p.tolist(), neg_p.tolist()
    adm["examples"] = {"positive": pos[:2], "negative": neg[:2]}
    polarity = LEXICONS.get(dc.lexicon or "")
    if polarity:
        adm["lexicon_auc"] = auc(lexicon_prob(pos, polarity), lexicon_prob(neg, polarity))
    promote = dc.concept.direction == "promote"
    prompts = list(dc.concept.prompts[: design.test_prompts])
    cont = S.generate(r, stock_point(), prompts, design.new_tokens)
    stock = S.read_texts(r, judge, promote, prompts, cont.texts, cont.ids, polarity)
    stock = S.scored(stock, stock)
    words = discriminative_words(judge, dc.judge_positive, dc.judge_negative)
    probe_text = keyword_probe(words)
    ids = r.tok(probe_text, add_special_tokens=False)["input_ids"]
    probe = S.scored(S.read_texts(r, judge, True, prompts, [probe_text] * len(prompts), [ids] * len(prompts)),
                     stock)
    keyword = {"words": words, **keyword_check(probe["judge_p"][0], adm["positive_scores"]),
               "score": float(np.mean(probe["score"])), "stock_score": float(np.mean(stock["score"])),
               "stock_judge_p": float(np.mean(stock["judge_p"]))}
    keyword["below_stock"] = keyword["score"] < keyword["stock_score"]
    return {"concept": dc.name, "kind": dc.kind, "direction": dc.concept.direction, "seed": seed,
            "pools": dc.extra.get("pools"), "judge": judge.to_dict(), "admission": adm, "keyword_probe": keyword,
            "prompts": prompts, "stock": stock, "seconds": round(time.perf_counter() - t0, 1),
            "cpu_seconds": round(time.process_time() - c0, 1)}


def setup_for(r: S.Readers, dc, seed: int, design, work: Path, rule=None, kl_probe=None) -> Setup:

    c = dc.concept
    toward, away = (list(c.positive), list(c.negative)) if c.direction == "promote" else (list(c.negative),
                                                                                         list(c.positive))
    return Setup(model=r.model, tok=r.tok, concept=c, toward=toward, away=away,
                 train_prompts=[S.fmt(r, p) for p in train_prompts()],
                 train_controls=[S.fmt(r, q) for q in neutral_prompts()[0][: design.train_controls]],
                 budget=design.budget(), chat=r.chat, seed=seed, work=work, rule=rule, kl_probe=kl_probe)


def _level(r: S.Readers, ctx: dict, judge, dc, point: Point, design, lexicon) -> dict:
    prompts = ctx["prompts"]
    cont = S.generate(r, point, prompts, design.new_tokens)
    raw = S.read_texts(r, judge, dc.concept.direction == "promote", prompts, cont.texts, cont.ids, lexicon)
    return S.scored(raw, ctx["stock"])


def control_reference(r: S.Readers, design):
    """The stock model's next-token log-probs on the control prompts (what every control KL is against)."""
    return next_token_logprobs(r.model, r.tok, [S.fmt(r, q) for q in controls(design)])


def measure_lever(r: S.Readers, dc, seed: int, ctx: dict, name: str, lr: float | None, design, work: Path,
                  ref, levels: tuple[float, ...] | None = None, steps: int | None = None) -> dict:
    """Build lever ``name`` (a learned one by the design's training rule, capped at ``steps``) and read it at
    each control-KL level (points-only levers: at their own KL); ``ref``: :func:`control_reference`. A matched
    strength outside :data:`STRENGTH_RANGE` is flagged (``strength_in_range``)."""
    import torch

    levels = tuple(levels or design.kl_levels)
    judge = EmbeddingJudge.from_dict(ctx["judge"], r.encoder)
    lexicon = LEXICONS.get(dc.lexicon or "")
    ctrl = controls(design)
    t0, c0 = time.perf_counter(), time.process_time()
    torch.manual_seed(seed)
    def probe() -> float:  # the model as it is now (the lever attached while it trains) against stock
        return S.control_kl(r, stock_point(), ctrl, ref)
    built = build(name, setup_for(r, dc, seed, design, work, design.rule(steps), probe), lr)
    train_s, train_cpu = time.perf_counter() - t0, time.process_time() - c0
    out: dict = {}
    try:
        if built.at is not None:
            def kl_at(s: float) -> float:
                return S.control_kl(r, built.at(s), ctrl, ref)
            matched = match_levels(kl_at, levels, s_max=S_MAX, tol=KL_TOL, max_evals=MAX_EVALS)
            for key, m in matched.items():
                out[key] = {**m, "own_kl": False, "strength_in_range": in_range(m["strength"]),
                            "items": _level(r, ctx, judge, dc, built.at(m["strength"]), design, lexicon)}
        else:
            for point in built.points[:1]:
                kl = S.control_kl(r, point, ctrl, ref)
                items = _level(r, ctx, judge, dc, point, design, lexicon)
                for t in levels:
                    out[level_key(t)] = {"strength": point.strength, "kl": kl, "target": t, "reached": None,
                                         "own_kl": True, "items": items}
    finally:
        built.cleanup()
    return {"lever": name, "lr": lr, "params": built.params, "levels": out,
            "info": {k: v for k, v in built.info.items() if k != "train_eval"},
            "train_seconds": round(train_s, 1), "train_cpu_seconds": round(train_cpu, 1),
            "seconds": round(time.perf_counter() - t0, 1), "cpu_seconds": round(time.process_time() - c0, 1)}


def levers_for(dc) -> list[str]:
    extra = ["walls"] if dc.concept.direction == "suppress" else []
    return ["prompting", "caa", *LEARNED, *extra]


def run_unit(r: S.Readers, dc, seed: int, out: Path, design, lrs: dict[str, float], log=print,
             levels: tuple[float, ...] | None = None, names: list[str] | None = None,
             folder: str = "units", steps: int | None = None) -> dict:
    """Context and every lever of one (concept, seed), each read back when already measured; their docs."""
    base = out / folder / dc.name / f"s{seed}"
    fp = {"version": VERSION, "design": design.to_dict(), "concept": dc.concept.model_dump(),
          "judge_texts": judge_digest(dc)}
    if dc.extra.get("source"):  # a concept file's concept: its judge and admission texts come from that file
        fp["source"] = dc.extra["source"]
    ctx = _read(base / "context.json", fp)
    if ctx is None:
        ctx = {"fingerprint": fp, **build_context(r, dc, seed, out, design)}
        _write(base / "context.json", ctx)
        log(f"{dc.name} s{seed}: judge AUC {ctx['admission']['auc']:.3f} "
            f"({'admitted' if ctx['admission']['admitted'] else 'not admitted'}), {ctx['cpu_seconds']} cpu-s")
    docs = {"context": ctx}
    ref = None  # computed once, for the first lever that needs measuring
    for name in names or levers_for(dc):
        lr = lrs.get(name)
        tag = name if lr is None or folder == "units" else f"{name}@{lr:g}"
        lfp = {**fp, "lever": name, "lr": lr, "levels": list(levels or design.kl_levels), "steps": steps}
        doc = _read(base / f"{tag}.json", lfp)
        if doc is None:
            ref = control_reference(r, design) if ref is None else ref
            try:
                doc = {"fingerprint": lfp, **measure_lever(r, dc, seed, ctx, name, lr, design,
                                                           out / "work" / dc.name / name, ref, levels,
                                                           steps)}
            except Exception as e:  # noqa: BLE001 - one lever's failure leaves the others measured
                log(f"{dc.name} s{seed}: {name} failed ({type(e).__name__}: {e})")
                continue
            _write(base / f"{tag}.json", doc)
            means = {k: round(float(np.mean(v["items"]["score"])), 3) for k, v in doc["levels"].items()}
            log(f"{dc.name} s{seed}: {tag} score {means} ({doc['cpu_seconds']} cpu-s)")
        docs[tag] = doc
    return docs
