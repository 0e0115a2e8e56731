"""One benchmark run: every concept × lever, each (concept, lever) checkpointed so a killed run resumes.

For each concept: the deterministic splits (:mod:`geosteer.bench.concepts`), the judge trained on its split,
the stock model measured on the validation and test prompts (the reference of every lever); then for each
lever: build it (train it on the lever split), measure every candidate point on the validation prompts,
choose the operating point by :func:`geosteer.bench.operating.choose_operating_point`, measure that point
on the test prompts. The finished (concept, lever) is written to ``<out>/cache/<concept>/<lever>.json``
with a fingerprint of everything it depends on; a later run with the same settings reads it back.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from geosteer.bench.budget import Budget
from geosteer.bench.catalog import levers
from geosteer.bench.operating import choose_operating_point
from geosteer.bench.registry import Point, Setup, stock_point
from geosteer.bench.scoring import Measured, measure, next_token_logprobs, summarize
from geosteer.io_utils import atomic_write_text
from geosteer.readers import ReadRefused, read_json

STATE_FILE = "bench_state.json"  # marks an output folder as a benchmark's (resumable)


@dataclass
class BenchConfig:
    model: str
    levers: list[str]
    budget: Budget
    seed: int = 0
    kl_budget: float = 0.5
    chat: bool = False
    train_tau: float = 0.1
    surfaces: str | None = None
    command: str = ""
    extra: dict = field(default_factory=dict)
    cached_only: bool = False  # assemble what the checkpoints hold; measure nothing

    def fingerprint(self, concept, lever: str) -> str:
        doc = {"model": self.model, "budget": self.budget.to_dict(), "seed": self.seed, "kl": self.kl_budget,
               "chat": self.chat, "tau": self.train_tau, "surfaces": self.surfaces, "lever": lever,
               "concept": concept.model_dump(), "version": 2}
        version = getattr(levers().get(lever), "version", 1)
        if version != 1:
            doc["lever_version"] = version
        members = getattr(levers().get(lever), "members", ())
        if members:  # a family: its record follows its members' records
            doc["members"] = [self.fingerprint(concept, m) for m in members]
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


@dataclass
class ConceptContext:
    """Everything shared by the levers of one concept."""

    concept: object
    splits: object
    judge: object
    controls: list[str]
    control_ref: object
    stock: dict  # split -> Measured
    fmt: Callable


def _fmt(tok, chat: bool):
    from geosteer.bench.prompts import format_prompt

    return lambda p, instruction=None: format_prompt(tok, p, chat, instruction)


def prepare_concept(model, tok, concept, cfg: BenchConfig, stock: dict | None = None) -> ConceptContext:
    """Splits, judge, controls and the stock model's measurements of one concept (``stock``: measurements
    of an earlier run with the same settings, split -> :class:`Measured`)."""
    from geosteer.bench.concepts import split_concept
    from geosteer.bench.judge import Judge
    from geosteer.bench.prompts import neutral_prompts

    b = cfg.budget
    splits = split_concept(concept, cfg.seed, b.validation_prompts, b.test_prompts)
    judge = Judge(seed=cfg.seed).fit(splits.judge_positive, splits.judge_negative)
    fmt = _fmt(tok, cfg.chat)
    controls = list(neutral_prompts()[1][: b.control_prompts])
    control_ref = next_token_logprobs(model, tok, [fmt(c) for c in controls])
    promote = concept.direction == "promote"
    stock = stock or {split: measure(model, tok, stock_point(), getattr(splits, split), controls, judge, promote,
                                     b.new_tokens, control_ref, fmt) for split in ("validation", "test")}
    return ConceptContext(concept, splits, judge, controls, control_ref, stock, fmt)


def _setup(model, tok, ctx: ConceptContext, cfg: BenchConfig, work: Path, log) -> Setup:
    from geosteer.bench.concepts import toward_away
    from geosteer.bench.prompts import neutral_prompts, train_prompts

    toward, away = toward_away(ctx.concept, ctx.splits)
    fmt = ctx.fmt
    return Setup(model=model, tok=tok, concept=ctx.concept, toward=toward, away=away,
                 train_prompts=[fmt(p) for p in train_prompts()],
                 train_controls=[fmt(c) for c in neutral_prompts()[0][: cfg.budget.train_controls]],
                 budget=cfg.budget, chat=cfg.chat, seed=cfg.seed, work=work, train_tau=cfg.train_tau, log=log,
                 surfaces=cfg.surfaces)


def _measure(model, tok, ctx: ConceptContext, point: Point, split: str, cfg: BenchConfig) -> Measured:
    return measure(model, tok, point, getattr(ctx.splits, split), ctx.controls, ctx.judge,
                   ctx.concept.direction == "promote", cfg.budget.new_tokens, ctx.control_ref, ctx.fmt)


def _summary(m: Measured, ref: Measured, point: Point, cfg: BenchConfig) -> dict:
    return {"strength": point.strength, "params": point.params,
            **summarize(m, ref, cfg.budget.bootstrap, cfg.seed)}


def run_lever(model, tok, ctx: ConceptContext, name: str, cfg: BenchConfig, work: Path, log=None,
              index: int | None = None) -> dict:
    """Build one lever, choose its operating point on validation, measure it on test; the cache record.
    ``index``: measure that candidate on test instead (a family's choice; no validation, no curve)."""
    import torch

    t0, c0 = time.perf_counter(), time.process_time()
    # every lever starts from the seed's random state, whatever ran before it in this process (a resumed
    # run, another lever list, a worker): LoRA's adapters are drawn from it
    torch.manual_seed(cfg.seed)
    prepared = levers()[name].build(_setup(model, tok, ctx, cfg, work, log))
    try:
        candidates = [stock_point(name), *prepared.points]
        if index is None:
            val = [ctx.stock["validation"]] + [_measure(model, tok, ctx, p, "validation", cfg)
                                               for p in prepared.points]
            curve = [_summary(m, ctx.stock["validation"], p, cfg) for m, p in zip(val, candidates, strict=True)]
            i = choose_operating_point(curve, cfg.kl_budget)
        else:
            curve, i = [], index
        point = candidates[i]
        test = ctx.stock["test"] if i == 0 else _measure(model, tok, ctx, point, "test", cfg)
    finally:
        prepared.cleanup()
    row = {"concept": ctx.concept.name, "lever": name, "strength": point.strength,
           "operating_point": {"index": i, "label": point.label, **point.params},
           **{k: v for k, v in summarize(test, ctx.stock["test"], cfg.budget.bootstrap, cfg.seed).items()},
           "params": prepared.params, "info": prepared.info, "seconds": round(time.perf_counter() - t0, 1),
           "cpu_seconds": round(time.process_time() - c0, 1),
           "examples": test.texts[:2]}
    return {"row": row, "curve": [{"concept": ctx.concept.name, "lever": name, **c} for c in curve]}


def _cache_path(out: Path, concept: str, lever: str) -> Path:
    return out / "cache" / concept / f"{lever}.json"


def read_cached(path: Path, fingerprint: str) -> dict | None:
    """The cached result at ``path`` when it was measured with ``fingerprint``; None when it is missing,
    unreadable (the bounded reader refuses it) or was measured otherwise (it is then measured again)."""
    if not path.exists() and not path.is_symlink():
        return None
    try:
        doc = read_json(path, what="cache file")
    except ReadRefused:
        return None
    return doc if isinstance(doc, dict) and doc.get("fingerprint") == fingerprint else None


def stock_row(ctx: ConceptContext, cfg: BenchConfig) -> dict:
    """The reference row: the stock model on the test prompts."""
    return {"concept": ctx.concept.name, "lever": "stock", "strength": 0.0,
            "operating_point": {"index": 0, "label": "stock model"},
            **summarize(ctx.stock["test"], ctx.stock["test"], cfg.budget.bootstrap, cfg.seed),
            "params": 0, "info": {}, "examples": ctx.stock["test"].texts[:2]}


def with_members(names: list[str]) -> list[str]:
    """``names`` with each family's members put before it (once): the order the levers are run in."""
    out: list[str] = []
    for n in names:
        out += [m for m in (*getattr(levers().get(n), "members", ()), n) if m not in out]
    return out


def _family(model, tok, ctx_of, concept, name: str, cfg: BenchConfig, out: Path, docs: dict, stock_doc: dict,
            log) -> dict | None:
    """A family's record from its members' (None where a member has none, or, with ``cached_only``, where
    the choice would need a measurement)."""
    from geosteer.bench.family import family_record

    members = levers()[name].members
    missing = [m for m in members if m not in docs]
    if missing and cfg.cached_only:
        return None
    if missing:
        raise RuntimeError(f"member {missing[0]} has no result")

    def measure(member: str, index: int) -> dict:
        work = out / "work" / concept.name / member
        try:
            return run_lever(model, tok, ctx_of(), member, cfg, work, log, index=index)["row"]
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return family_record(name, members, docs, stock_doc["row"], cfg.kl_budget,
                         None if cfg.cached_only else measure)


def _todo(concept, cfg: BenchConfig, out: Path) -> list[str]:
    """The levers of ``concept`` (families' members included) that have no checkpoint for these settings."""
    return [n for n in with_members(cfg.levers)
            if read_cached(_cache_path(out, concept.name, n), cfg.fingerprint(concept, n)) is None]


def concept_pending(concept, cfg: BenchConfig, out: Path) -> bool:
    """Whether running ``concept`` would measure anything (a lever or the stock model not checkpointed)."""
    if cfg.cached_only:
        return False
    return bool(_todo(concept, cfg, out)) or read_cached(
        _cache_path(out, concept.name, "stock"), cfg.fingerprint(concept, "stock")) is None


def run_concept(model, tok, concept, cfg: BenchConfig, out: Path, log=None,
                failed: list | None = None) -> tuple[list[dict], list[dict], dict]:
    """Every lever on one concept (cached ones read back; a family's members run first): (rows, curves,
    concept record). A lever that raises is logged and added to ``failed``; the others go on."""
    failed = failed if failed is not None else []
    say = log or (lambda s: None)
    names = with_members(cfg.levers)
    todo = _todo(concept, cfg, out)
    stock_fp = cfg.fingerprint(concept, "stock")
    stock_doc = read_cached(_cache_path(out, concept.name, "stock"), stock_fp)
    ctx: list = []
    if cfg.cached_only:
        if stock_doc is None:
            return [], [], None
        todo = []

    def ctx_of() -> ConceptContext:  # prepared on first need (the stock measurements read back)
        if not ctx:
            measured = ({k: Measured.from_dict(v) for k, v in stock_doc["measured"].items()}
                        if stock_doc is not None and "measured" in stock_doc else None)
            ctx.append(prepare_concept(model, tok, concept, cfg, measured))
        return ctx[0]
    if todo or stock_doc is None:
        c = ctx_of()
        stock_doc = {"fingerprint": stock_fp, "row": stock_row(c, cfg), "concept": _concept_record(c),
                     "measured": {k: m.to_dict() for k, m in c.stock.items()}}
        _write(_cache_path(out, concept.name, "stock"), stock_doc)
    rows, curves, docs = [stock_doc["row"]], [], {}
    for name in names:
        path, fp = _cache_path(out, concept.name, name), cfg.fingerprint(concept, name)
        doc = read_cached(path, fp)
        family = bool(levers()[name].members)
        if doc is None and cfg.cached_only and not family:
            continue
        if doc is None:
            say(f"{concept.name}: {name} ...")
            work = out / "work" / concept.name / name
            try:
                rec = (_family(model, tok, ctx_of, concept, name, cfg, out, docs, stock_doc, log) if family
                       else run_lever(model, tok, ctx_of(), name, cfg, work, log))
            except Exception as e:  # noqa: BLE001 - one lever's failure leaves the others measured
                failed.append({"concept": concept.name, "lever": name, "error": f"{type(e).__name__}: {e}"})
                say(f"{concept.name}: {name} failed ({type(e).__name__}: {e}); a rerun tries it again")
                continue
            finally:
                shutil.rmtree(work, ignore_errors=True)
            if rec is None:  # cached_only: a family whose choice needs a measurement
                continue
            doc = {"fingerprint": fp, **rec}
            if not cfg.cached_only:
                _write(path, doc)
            r = doc["row"]
            say(f"{concept.name}: {name} score {r['score']['mean']:.3f} concept {r['concept_score']['mean']:.3f} "
                f"KL {r['control_kl']['mean']:.3f} at {r['operating_point']['label']} ({r['seconds']} s)")
        docs[name] = doc
        if name in cfg.levers:
            rows.append(doc["row"])
            curves += doc["curve"]
    return rows, curves, stock_doc["concept"]


def _concept_record(ctx: ConceptContext) -> dict:
    s = ctx.splits
    return {"name": ctx.concept.name, "direction": ctx.concept.direction,
            "judge_accuracy_on_lever_texts": ctx.judge.accuracy(s.lever_positive, s.lever_negative),
            "n_lever_texts": [len(s.lever_positive), len(s.lever_negative)],
            "n_judge_texts": [len(s.judge_positive), len(s.judge_negative)],
            "validation_prompts": s.validation, "test_prompts": s.test}


def _write(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(doc, indent=1, allow_nan=True) + "\n")


def start_state(out: Path, cfg: BenchConfig) -> None:
    """Mark ``out`` as a benchmark's output folder (so a later run may resume in it)."""
    out.mkdir(parents=True, exist_ok=True)
    _write(out / STATE_FILE, {"format": "geosteer-bench-state", "model": cfg.model})


def run_bench(model, tok, concepts: list, cfg: BenchConfig, out: Path, log=None, done: dict | None = None) -> dict:
    """Every concept; the results document (``reference``, ``meta``, ``concepts``, ``rows``, ``curves``).
    ``done``: concepts already run elsewhere (:func:`geosteer.bench.workers.run_parallel`'s results), taken
    as they are, in the order of ``concepts``."""
    start_state(out, cfg)
    rows, curves, recs, failed = [], [], [], []
    for c in concepts:
        if done is not None and c.name in done:
            r, cv, rec, f = done[c.name]
            failed += f
        else:
            r, cv, rec = run_concept(model, tok, c, cfg, out, log, failed)
        rows += r
        curves += cv
        recs += [rec] if rec is not None else []
    return {"reference": f"stock model ({cfg.model}): every lever's strength 0 and every control KL",
            "meta": {"command": cfg.command, "cached_only": cfg.cached_only, "model": cfg.model,
                     "budget": cfg.budget.to_dict(), "seed": cfg.seed,
                     "kl_budget": cfg.kl_budget, "chat": cfg.chat, "train_tau": cfg.train_tau,
                     "levers": cfg.levers, **cfg.extra},
            "concepts": recs, "rows": rows, "curves": curves, "failed": failed}
