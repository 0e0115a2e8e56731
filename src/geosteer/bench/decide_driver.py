"""The decisive benchmark's run: learning rates chosen on the dev concepts, then every test (concept, seed).

Phase 1 trains each learned lever by the training rule (:mod:`geosteer.bench.train_rule`, capped at the design's
steps) at every learning rate of the grid on each dev concept (seed 0) and reads it at the training target's
control KL; a lever's learning rate is the one with the best mean score there (ties: the smaller), the grid
extended by x3 steps past an edge choice until the choice is interior (:class:`~geosteer.bench.train_rule.LrSearch`,
in rounds); the test phase's step cap is set from the steps the levers needed at their chosen rates
(:func:`~geosteer.bench.train_rule.step_cap`). Phase 2 runs every test concept at seed 0, then at the next seeds,
each (concept, seed) in one worker process (its own copy of the models, one torch thread). Everything is
checkpointed (:mod:`geosteer.bench.decide_run`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from geosteer.bench.decide_concepts import by_name, dev_by_name
from geosteer.bench.decide_folder import write_sealed
from geosteer.bench.decide_models import check_families, default_reader, family_of_type
from geosteer.bench.decide_run import levers_for, run_unit
from geosteer.bench.decide_score import Readers
from geosteer.bench.design import Design
from geosteer.bench.judges import default_encoder
from geosteer.bench.matched import LEARNED
from geosteer.bench.train_rule import LrSearch, step_cap

_LOADED: dict = {}


@dataclass(frozen=True)
class RunSpec:
    model: str
    out: str
    design: dict
    threads: int = 1
    concepts_file: str | None = None  # a user's concept file, added to the bundled test concepts
    bundled: bool = True  # False: the file's concepts alone
    explore: tuple[str, ...] = ()  # other surface forms measured beside the matched levers (not in the verdict)
    reader: str | None = None  # the fluency reader (None: the default for the model's family)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def readers(model: str, threads: int = 1, reader: str | None = None):
    """The steered model, its fluency reader (default: by the model's family, :mod:`geosteer.bench.decide_models`)
    and the encoder (loaded once per process); a reader found to be of the model's family once both are loaded
    (a family not known before) is refused."""
    reader = default_reader(model) if reader is None else reader
    if (model, reader) not in _LOADED:
        import torch

        from geosteer.models.loading import load_model

        torch.set_num_threads(threads)
        m, tok = load_model(model)
        r, rtok = load_model(reader)
        check_families(model, reader, family_of_type(m.config.model_type), family_of_type(r.config.model_type))
        _LOADED[(model, reader)] = Readers(m, tok, r, rtok, default_encoder(), chat=True)
    return _LOADED[(model, reader)]


def _design(doc: dict):

    """A design from its recorded dict (a field an earlier design did not record takes its default)."""
    tuples = ("seeds", "kl_levels", "decision_levels", "lr_grid", "kinds")
    return Design(**{**doc, **{k: tuple(doc[k]) for k in tuples if k in doc}})


def _dev_job(args) -> tuple[str, str, float, float, int | None]:
    """(concept, lever, lr, mean score at the training target's KL, steps it needed: None if not reached)."""
    spec, concept, lever, lr = args

    design = _design(spec.design)
    docs = run_unit(readers(spec.model, spec.threads, spec.reader), dev_by_name(concept, 0), 0, Path(spec.out), design,
                    {lever: lr}, _say, levels=(design.train_kl,), names=[lever], folder="dev")
    doc = docs.get(f"{lever}@{lr:g}")
    score = float(np.mean(next(iter(doc["levels"].values()))["items"]["score"])) if doc else float("nan")
    train = ((doc or {}).get("info") or {}).get("train") or {}
    return concept, lever, lr, score, (int(train["steps"]) if train.get("reached") else None)


def _test_job(args) -> tuple[str, int]:
    spec, concept, seed, lrs, steps = args

    design = _design(spec.design)
    dc = by_name([concept], spec.concepts_file, seed, spec.bundled, design.test_prompts)[0]  # the seed's draw of its
    # texts and prompts
    run_unit(readers(spec.model, spec.threads, spec.reader), dc, seed, Path(spec.out), design, lrs, _say,
             names=[*levers_for(dc), *spec.explore], steps=steps)
    return concept, seed


def _map(fn, jobs: list, workers: int):
    if workers <= 1 or len(jobs) <= 1:
        yield from map(fn, jobs)
        return
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(workers) as pool:
        yield from pool.imap_unordered(fn, jobs)


def choose_lrs(spec: RunSpec, workers: int) -> tuple[dict, int]:
    """Phase 1: ({lever: lr}, the test phase's step cap), and the record they came from
    (``<out>/learning_rates.json``)."""
    design = _design(spec.design)
    learned = (*LEARNED, *spec.explore)
    dev = design.dev_concepts()
    searches = {lever: LrSearch(design.grid(lever)) for lever in learned}
    needed: dict[tuple[str, float], list[int | None]] = {}
    while jobs := [(spec, c, lever, lr) for lever, s in searches.items() for lr in s.pending() for c in dev]:
        done: dict[tuple[str, float], dict[str, tuple[float, int | None]]] = {}
        for concept, lever, lr, score, steps in _map(_dev_job, jobs, workers):
            done.setdefault((lever, lr), {})[concept] = (score, steps)
        scores: dict[tuple[str, float], list[float]] = {}
        for key, by_concept in done.items():  # in the dev concepts' order, whatever order the workers finished in
            rows = [by_concept[c] for c in dev if c in by_concept]
            scores[key] = [r[0] for r in rows]
            needed.setdefault(key, []).extend(r[1] for r in rows)
        for (lever, lr), v in scores.items():
            searches[lever].add(lr, float("nan") if np.isnan(v).any() else float(np.mean(v)))
    chosen = {lever: s.chosen() for lever, s in searches.items() if s.chosen() is not None}
    cap = step_cap([n for lever, lr in chosen.items() for n in needed.get((lever, lr), [])], design.steps)
    grids = design.extra.get("lr_grids")
    doc = {"criterion": f"mean score at control KL {design.train_kl:g} (the training target) over the dev "
                        f"concepts {list(dev)}, seed 0; ties: the smaller learning rate; the grid extended by x3 "
                        "past an edge choice until interior (at most 3 steps a side)"
                        + (f"; each lever's grid: {design.extra.get('lr_grids_from', 'its own')}" if grids else ""),
           "dev_concepts": list(dev),
           "grid": {lever: list(design.grid(lever)) for lever in learned} if grids else list(design.lr_grid),
           "search": {lever: s.to_dict() for lever, s in searches.items()}, "chosen": chosen,
           "steps_needed": {lever: needed.get((lever, lr), []) for lever, lr in chosen.items()}, "step_cap": cap}
    write_sealed(Path(spec.out) / "learning_rates.json", doc)
    return chosen, cap["cap"]


def run_all(spec: RunSpec, workers: int, concepts: list[str] | None = None,
            seeds: tuple[int, ...] | None = None) -> None:
    """Both phases for ``seeds`` (default: the design's); each (concept, seed) is on disk as it finishes, so a
    rerun resumes."""
    Path(spec.out).mkdir(parents=True, exist_ok=True)
    lrs, cap = choose_lrs(spec, workers)
    _say(f"learning rates: {lrs}; step cap {cap}")
    design = _design(spec.design)
    names = [c.name for c in by_name(concepts, spec.concepts_file, 0, spec.bundled, design.test_prompts)]
    jobs = [(spec, c, seed, lrs, cap) for seed in (seeds or design.seeds) for c in names]
    for concept, seed in _map(_test_job, jobs, workers):
        _say(f"done: {concept} s{seed}")
