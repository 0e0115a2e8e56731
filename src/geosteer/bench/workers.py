"""Concepts run in parallel: each in a worker process with its own copy of the model and one torch thread.

A concept's levers run one after another in one process, each built from the seed's random state, and
every (concept, lever) is written to the same checkpoint as in a one-process run; the rows are that run's. Workers are
started with the ``spawn`` method (no forked OpenMP state) and take the next concept when one is done.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from geosteer.errors import GeosteerError


@dataclass(frozen=True)
class LoadSpec:
    """How each worker loads its copy of the model."""

    model: str
    device: str = "cpu"
    dtype: str = "float32"
    threads: int = 1


MAX_SEED = 2**31 - 1  # seeds every generator a benchmark seeds takes (numpy, torch, Python)


def cpu_cores() -> int:
    """The CPU cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def check_workers(workers: int) -> None:
    """``--workers``: 0 (automatic) up to the CPU cores (each worker is a process with its own model)."""
    if workers < 0:
        raise GeosteerError(f"--workers must be >= 0 (0: one per core the load leaves free; got {workers})")
    if workers > cpu_cores():
        raise GeosteerError(f"--workers {workers}: at most {cpu_cores()} (the CPU cores here; each worker is a "
                            "process with its own model)")


def check_seed(seed: int, option: str = "--seed") -> None:
    """A seed in 0..2**31-1, checked before any model loads."""
    if not 0 <= seed <= MAX_SEED:
        raise GeosteerError(f"{option}: seed {seed} is out of range; seeds are integers 0 to {MAX_SEED}")


def resolve_workers(workers: int, pending: int, device: str = "cpu", threads: int = 0,
                    cpus: int | None = None, load: float | None = None) -> int:
    """The worker processes to start for ``pending`` concepts that need measuring. ``workers`` > 0: that many;
    0 (automatic): the cores the 1-minute load average leaves free, on the CPU only and only when no
    thread count was asked for (``threads`` > 0: one process with that many threads). Never more than
    ``pending``, at least 1."""
    if workers == 0:
        if device != "cpu" or threads > 0:
            workers = 1
        else:
            from geosteer.threads import threads_for_load

            cpus = os.cpu_count() if cpus is None else cpus
            workers = threads_for_load(cpus or 1, cpus, load)
    return max(1, min(workers, pending))


_LOADED: dict = {}


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _run_one(spec: LoadSpec, concept: dict, cfg, out: Path, log: bool):
    """One concept (its ``model_dump()``) in a worker, the model loaded on the worker's first concept:
    (rows, curves, record, failed)."""
    from geosteer.bench.concepts import concept_from_dict
    from geosteer.bench.run import run_concept

    if "model" not in _LOADED:
        import torch

        from geosteer.models.loading import load_model

        torch.set_num_threads(spec.threads)
        _LOADED["model"] = load_model(spec.model, dtype=spec.dtype, device=spec.device)
    model, tok = _LOADED["model"]
    failed: list = []
    rows, curves, rec = run_concept(model, tok, concept_from_dict(concept), cfg, out, _say if log else None, failed)
    return rows, curves, rec, failed


def run_parallel(concepts: list, cfg, out: Path, spec: LoadSpec, workers: int, log: bool = True) -> dict:
    """Every concept of ``concepts`` in ``workers`` spawned processes → {name: (rows, curves, record,
    failed)}. A worker that dies stops the run; the finished (concept, lever) checkpoints stay."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    done: dict = {}
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {c.name: pool.submit(_run_one, spec, c.model_dump(), cfg, out, log) for c in concepts}
        try:
            for name, fut in futures.items():
                done[name] = fut.result()
        except BrokenProcessPool as e:
            pool.shutdown(wait=True, cancel_futures=True)
            raise GeosteerError("a benchmark worker process ended without a result (out of memory?); the "
                                "finished (concept, lever) results are kept: run the same command again to "
                                "resume") from e
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    return done
