"""The decisive benchmark's run: learning rates chosen on the dev concepts, then every test (concept, seed).

Phase 1 trains each learned lever at every learning rate of the grid on each dev concept (seed 0) and reads it
at the highest KL level; a lever's learning rate is the one with the best mean score there (ties: the smaller).
Phase 2 runs every test concept at seed 0, then at the next seeds, each (concept, seed) in one worker process
(its own copy of the models, one torch thread). Everything is checkpointed (:mod:`geosteer.bench.decide_run`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from geosteer.bench.decide_concepts import DEV, by_name, dev_by_name
from geosteer.bench.decide_folder import write_sealed
from geosteer.bench.decide_run import levers_for, run_unit
from geosteer.bench.decide_score import Readers
from geosteer.bench.design import Design
from geosteer.bench.judges import default_encoder
from geosteer.bench.matched import LEARNED

READERS = {"smollm2": "gemma3-270m", "gemma3-270m": "smollm2"}  # the fluency reader is another family
_LOADED: dict = {}


@dataclass(frozen=True)
class RunSpec:
    model: str
    out: str
    design: dict
    threads: int = 1
    concepts_file: str | None = None  # a user's concept file instead of the bundled test concepts
    explore: tuple[str, ...] = ()  # other surface forms measured beside the matched levers (not in the verdict)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def readers(model: str, threads: int = 1):
    """The steered model, its fluency reader and the encoder (loaded once per process)."""
    if model not in _LOADED:
        import torch

        from geosteer.models.loading import load_model

        torch.set_num_threads(threads)
        m, tok = load_model(model)
        reader, rtok = load_model(READERS.get(model, "gemma3-270m"))
        _LOADED[model] = Readers(m, tok, reader, rtok, default_encoder(), chat=True)
    return _LOADED[model]


def _design(doc: dict):

    return Design(**{**doc, "seeds": tuple(doc["seeds"]), "kl_levels": tuple(doc["kl_levels"]),
                     "lr_grid": tuple(doc["lr_grid"])})


def _dev_job(args) -> tuple[str, str, float, float]:
    spec, concept, lever, lr = args

    design = _design(spec.design)
    top = max(design.kl_levels)
    docs = run_unit(readers(spec.model, spec.threads), dev_by_name(concept), 0, Path(spec.out), design,
                    {lever: lr}, _say, levels=(top,), names=[lever], folder="dev")
    doc = docs.get(f"{lever}@{lr:g}")
    score = float(np.mean(next(iter(doc["levels"].values()))["items"]["score"])) if doc else float("nan")
    return concept, lever, lr, score


def _test_job(args) -> tuple[str, int]:
    spec, concept, seed, lrs = args

    dc = by_name([concept], spec.concepts_file)[0]
    run_unit(readers(spec.model, spec.threads), dc, seed, Path(spec.out), _design(spec.design), lrs, _say,
             names=[*levers_for(dc), *spec.explore])
    return concept, seed


def _map(fn, jobs: list, workers: int):
    if workers <= 1 or len(jobs) <= 1:
        yield from map(fn, jobs)
        return
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(workers) as pool:
        yield from pool.imap_unordered(fn, jobs)


def choose_lrs(spec: RunSpec, workers: int) -> dict:
    """Phase 1: {lever: lr} and the table it came from (written to ``<out>/learning_rates.json``)."""
    design = _design(spec.design)
    learned = (*LEARNED, *spec.explore)
    jobs = [(spec, c, lever, lr) for lever in learned for lr in design.lr_grid for c in DEV]
    table: dict[str, dict[str, list[float]]] = {}
    for _concept, lever, lr, score in _map(_dev_job, jobs, workers):
        table.setdefault(lever, {}).setdefault(f"{lr:g}", []).append(score)
    chosen = {}
    for lever in learned:
        means = {lr: float(np.mean(v)) for lr, v in table.get(lever, {}).items() if not np.isnan(v).any()}
        if means:
            best = max(means.values())
            chosen[lever] = min(float(lr) for lr, m in means.items() if m == best)
    doc = {"criterion": f"mean score at control KL {max(design.kl_levels):g} over the dev concepts {list(DEV)}, "
                        "seed 0; ties: the smaller learning rate",
           "grid": list(design.lr_grid), "table": {k: {lr: float(np.mean(v)) for lr, v in t.items()}
                                                   for k, t in table.items()}, "chosen": chosen}
    write_sealed(Path(spec.out) / "learning_rates.json", doc)
    return chosen


def run_all(spec: RunSpec, workers: int, concepts: list[str] | None = None,
            seeds: tuple[int, ...] | None = None) -> None:
    """Both phases for ``seeds`` (default: the design's); each (concept, seed) is on disk as it finishes, so a
    rerun resumes."""
    Path(spec.out).mkdir(parents=True, exist_ok=True)
    lrs = choose_lrs(spec, workers)
    _say(f"learning rates: {lrs}")
    design = _design(spec.design)
    names = [c.name for c in by_name(concepts, spec.concepts_file)]
    jobs = [(spec, c, seed, lrs) for seed in (seeds or design.seeds) for c in names]
    for concept, seed in _map(_test_job, jobs, workers):
        _say(f"done: {concept} s{seed}")
