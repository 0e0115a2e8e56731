"""Predicted CPU cost of the ladder's pretraining item (3.27) at one model size, from a few timed steps.

Times the study's own code (``paper/studies/directional/pretrain_downstream.py``) at the given size: one run
of ``--timed-steps`` training steps ending in one evaluation on the validation batches, then (the edit still
attached) one more evaluation and the proxy scoring of ``--timed-proxy-n`` items a task, each on the wall
clock and in this process's CPU time (the steadier of the two on a shared machine). From these it predicts
the criterion's budget: ``--runs`` runs (variants × seeds) of ``--steps`` steps, an evaluation every
``--eval-every`` steps and at the end, the proxy scoring of ``--proxy-n`` items a task. Prints one JSON
object: ``measured`` and ``predicted`` seconds per clock (the prediction is scaled from the measured pieces).

    python paper/studies/ladder/pretrain_cost.py --d-model 192 --layers 8 --timed-steps 20 --threads 1
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from geosteer.errors import GeosteerError
from geosteer_paper.directional.pretrain import byte_ids, sample_batch, small_model
from geosteer_paper.scripts import run_script

if not __package__:  # run as a file: paper/ on the path, as the tests have it, for the study it times
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from studies.directional.pretrain_downstream import (  # noqa: E402
    PROXY_TASKS,
    VARIANTS,
    _val,
    proxy_scores,
    train_variant,
)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d-model", type=int, required=True)
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--variant", default="attn_par", help="the variant timed (attn_par: the edit's cost too)")
    ap.add_argument("--timed-steps", type=int, default=20)
    ap.add_argument("--timed-proxy-n", type=int, default=20, help="proxy items a task scored in the timing")
    ap.add_argument("--steps", type=int, default=1000, help="the budget's steps a run")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--proxy-n", type=int, default=200)
    ap.add_argument("--runs", type=int, default=6, help="the budget's runs (variants × seeds)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--val-batches", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    return ap


def predict(measured: dict, *, steps: int, eval_every: int, proxy_n: int, timed_proxy_n: int, runs: int) -> dict:
    """The budget's seconds from the measured pieces: per run, steps × a step + evaluations × an evaluation
    + the proxy scoring scaled by items; in all, the data load once and ``runs`` runs."""
    evals = steps // eval_every + (1 if steps % eval_every else 0)
    per_run = (steps * measured["step_s"] + evals * measured["eval_s"]
               + measured["proxy_s"] * proxy_n / timed_proxy_n)
    return {"evaluations_per_run": evals, "per_run_s": per_run, "total_s": measured["load_s"] + runs * per_run}


def _now() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _pieces(marks: list[tuple[float, float]], timed_steps: int, clock: int) -> dict:
    """Seconds on one clock (0: wall, 1: this process's CPU) between the marks: start, data loaded, loop
    started, loop ended (its one evaluation included), evaluation, proxy scoring."""
    t = [m[clock] for m in marks]
    loop, ev = t[3] - t[2], t[4] - t[3]
    return {"load_s": t[1] - t[0], "step_s": max(0.0, loop - ev) / timed_steps, "eval_s": ev,
            "proxy_s": t[5] - t[4], "loop_s": loop}


def measure(a: argparse.Namespace) -> dict:
    """The measured pieces, in wall and CPU seconds: data load, a training step (the run's time, its model's
    build included, less its one evaluation, over its steps), an evaluation, the timed proxy scoring."""
    from geosteer.tasks.proxies import generate

    torch.set_num_threads(a.threads)
    marks = [_now()]
    train, held = byte_ids("train", max_chars=4_000_000), byte_ids("heldout")
    g = torch.Generator().manual_seed(12345)
    vals = [sample_batch(held, g, a.batch, a.ctx) for _ in range(a.val_batches)]
    docs = {task: generate(task, a.timed_proxy_n, 0) for task in PROXY_TASKS}
    marks.append(_now())

    def after(model, ivs):
        marks.append(_now())
        _val(model, ivs, vals)
        marks.append(_now())
        proxy_scores(model, docs, a.ctx)
        marks.append(_now())

    model_kw = {"d_model": a.d_model, "layers": a.layers, "heads": max(1, a.d_model // 32), "ffn": 3 * a.d_model}
    small_model(ctx=a.ctx, seed=0, **model_kw)  # the first build's one-time imports stay out of the timed loop
    marks.append(_now())
    res = train_variant(a.variant, 0, train, vals, steps=a.timed_steps, batch=a.batch, ctx=a.ctx, lr=3e-3,
                        eval_every=a.timed_steps, model_kw=model_kw, after=after, log=lambda *_: None)
    return {"params": res["params"], "wall": _pieces(marks, a.timed_steps, 0),
            "cpu": _pieces(marks, a.timed_steps, 1)}


def run(a: argparse.Namespace, argv: Sequence[str] | None) -> None:
    if a.variant not in VARIANTS:
        raise GeosteerError(f"unknown variant '{a.variant}'; valid: {', '.join(VARIANTS)}")
    for name in ("d_model", "layers", "timed_steps", "timed_proxy_n", "steps", "eval_every", "runs", "threads"):
        if getattr(a, name) < 1:
            raise GeosteerError(f"--{name.replace('_', '-')} must be at least 1")
    measured = measure(a)
    out = {"size": {"d_model": a.d_model, "layers": a.layers}, "variant": a.variant, "threads": a.threads,
           "params": measured["params"], "timed": {"steps": a.timed_steps, "proxy_n": a.timed_proxy_n},
           "budget": {"steps": a.steps, "eval_every": a.eval_every, "proxy_n": a.proxy_n, "runs": a.runs},
           "measured": {}, "predicted": {}}
    for clock in ("wall", "cpu"):
        out["measured"][clock] = {k: round(v, 3) for k, v in measured[clock].items()}
        pred = predict(measured[clock], steps=a.steps, eval_every=a.eval_every, proxy_n=a.proxy_n,
                       timed_proxy_n=a.timed_proxy_n, runs=a.runs)
        out["predicted"][clock] = {k: round(v, 1) if isinstance(v, float) else v for k, v in pred.items()}
    print(json.dumps(out, indent=1))


def main(argv: Sequence[str] | None = None) -> None:
    run_script(parser(), run, argv)


if __name__ == "__main__":
    main()
