"""``geosteer bench steering``: the steering benchmark on your model and your concepts."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import typer

from geosteer.bench.workers import check_seed, check_workers
from geosteer.cli.common import DEVICE_OPT, DTYPE_OPT, MODEL_OPT, THREADS_OPT, emit, load
from geosteer.cli.outputs import out_dir
from geosteer.errors import GeosteerError


def _check_out(out: Path) -> None:
    """An output folder is new, empty, or an earlier run's (which it resumes): nothing else is written over."""
    from geosteer.bench.run import STATE_FILE
    from geosteer.io_utils import check_resumable_folder

    check_resumable_folder(out, STATE_FILE)


def _concept_path(path: Path):
    if str(path) == "bundled" and not path.exists():
        from importlib import resources

        return resources.files("geosteer.data").joinpath("bench_concepts.json")
    return path


def _check_options(kl_budget: float, train_tau: float, levers: list[str], surfaces: str | None) -> None:
    if not (math.isfinite(kl_budget) and kl_budget > 0):
        raise GeosteerError(f"--kl-budget must be a positive number of nats (got {kl_budget})")
    if not (math.isfinite(train_tau) and train_tau > 0):
        raise GeosteerError(f"--train-tau must be a positive number of nats (got {train_tau})")
    if "surfaces-shipped" in levers and not surfaces:
        raise GeosteerError("the surfaces-shipped lever needs --surfaces DIR (the surfaces it starts from)")


def steering_cmd(
    concepts: Path = typer.Option(..., "--concepts", help="concept file: a JSON list of {name, direction "
                                  "(promote|suppress), positive, negative, prompts}; 'bundled': the twelve "
                                  "concepts that ship with geosteer"),
    out: Path = typer.Option(..., "--out", callback=out_dir(), help="output folder: results.json, figures/, "
                             "and cache/ (a rerun with the same settings resumes from it)"),
    model: str = MODEL_OPT,
    lever_spec: str | None = typer.Option(None, "--levers", help="comma-separated levers (default: prompting, "
                                          "caa, vector, lora, loreft, surfaces, walls, scales, ffn-gates; also "
                                          "surfaces-shipped with --surfaces, and the surface variants "
                                          "surfaces-rank1, surfaces-rank2, surfaces-layers, surfaces+vector, "
                                          "surfaces-kl, and surfaces-best: all six surface levers as one, "
                                          "the form chosen on validation)"),
    budget: str = typer.Option("small", "--budget", help="small (everyday) | full"),
    seed: int = typer.Option(0, "--seed", help="seed of the splits, the judge and every training run"),
    kl_budget: float = typer.Option(0.5, "--kl-budget", help="operating-point rule: the largest mean control "
                                    "next-token KL (nats) a lever's chosen point may have"),
    train_tau: float = typer.Option(0.1, "--train-tau", help="control-KL hinge τ of every learned lever's "
                                    "training objective (nats)"),
    chat: bool | None = typer.Option(None, "--chat/--no-chat", help="format every prompt with the tokenizer's "
                                     "chat template (default: when the tokenizer has one)"),
    surfaces: Path | None = typer.Option(None, "--surfaces", help="shipped surfaces the surfaces-shipped lever "
                                        "starts from"),
    figures: bool = typer.Option(True, "--figures/--no-figures", help="one HTML figure per concept (viz extra)"),
    cached_only: bool = typer.Option(False, "--cached-only", help="write the results of what --out's checkpoints "
                                     "hold (a run cut short) without measuring anything"),
    workers: int = typer.Option(0, "--workers", help="concepts measured in parallel, each in a process of its "
                                "own with its own copy of the model and one torch thread (the rows are the "
                                "same as with one); 0: on the CPU without --threads, one per core the 1-minute "
                                "load average leaves free, else 1"),
    device: str = DEVICE_OPT, dtype: str = DTYPE_OPT, threads: int = THREADS_OPT,
) -> None:
    """Every lever on every concept, each at its own operating point chosen on validation prompts by one rule;
    scored on test prompts by a judge that is not the model (reference: the stock model)."""
    from geosteer.bench.budget import get_budget
    from geosteer.bench.catalog import parse_levers
    from geosteer.bench.concepts import read_concepts

    chosen = parse_levers(lever_spec)
    b = get_budget(budget)
    _check_options(kl_budget, train_tau, chosen, surfaces)
    check_workers(workers)
    check_seed(seed)
    items = read_concepts(_concept_path(concepts))  # refused in one line before any model loads
    _check_out(out)
    _run(items, chosen, b, model, out, seed, kl_budget, train_tau, chat, surfaces, figures, device, dtype, threads,
         cached_only, workers)


def _log(line: str) -> None:
    typer.echo(line, err=True)


def _run(items, chosen, b, model, out, seed, kl_budget, train_tau, chat, surfaces, figures, device, dtype,
         threads, cached_only, workers) -> None:
    from geosteer.bench.results import markdown_table, write_figures, write_results
    from geosteer.bench.run import BenchConfig, concept_pending, run_bench, start_state
    from geosteer.bench.workers import LoadSpec, resolve_workers, run_parallel
    from geosteer.eval.chat import has_chat_template

    m, tok = load(model, threads=threads, device=device, dtype=dtype)
    use_chat = has_chat_template(tok) if chat is None else chat
    if use_chat and not has_chat_template(tok):
        raise GeosteerError("--chat needs a tokenizer with a chat template; this model's tokenizer has none")
    cfg = BenchConfig(model=model, levers=chosen, budget=b, seed=seed, kl_budget=kl_budget, chat=use_chat,
                      train_tau=train_tau, surfaces=str(surfaces) if surfaces else None,
                      command="geosteer " + " ".join(sys.argv[1:]), cached_only=cached_only)
    pending = [c for c in items if concept_pending(c, cfg, out)]
    n = resolve_workers(workers, len(pending), device, threads)
    cfg.extra["workers"] = n
    if n == 1:
        doc = run_bench(m, tok, items, cfg, out, log=_log)
    else:
        del m  # each worker loads its own copy
        start_state(out, cfg)
        _log(f"{len(pending)} concepts in {n} worker processes, one torch thread each")
        done = run_parallel(pending, cfg, out, LoadSpec(model, device, dtype, threads or 1), n)
        doc = run_bench(None, tok, items, cfg, out, log=_log, done=done)
    path = write_results(doc, out)
    if figures:
        try:
            write_figures(doc, out)
        except ImportError as e:  # the viz extra is optional
            typer.echo(f"note: no figures ({e})", err=True)
    emit(markdown_table(doc["rows"]), False)
    emit(f"results: {path}", False)
    if doc["failed"]:
        raise GeosteerError(f"{len(doc['failed'])} (concept, lever) runs failed (listed in {path} under 'failed'; "
                            "the others are measured); run the same command again to retry them")


def register(app: typer.Typer) -> None:
    bench = typer.Typer(no_args_is_help=True, help="Benchmarks a user runs on their own model.")
    bench.command("steering")(steering_cmd)
    from geosteer.bench.cli_text import text_cmd

    bench.command("text")(text_cmd)
    from geosteer.bench.cli_judge import judge_cmd

    bench.command("judge")(judge_cmd)
    from geosteer.bench.cli_decide import decide_cmd

    bench.command("decide")(decide_cmd)
    app.add_typer(bench, name="bench")
