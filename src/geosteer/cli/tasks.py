"""``geosteer tasks build``: the CLI face of :func:`geosteer.tasks.build.build` (local lm-eval tasks)."""

from __future__ import annotations

from pathlib import Path

import typer

from geosteer.cli.common import JSON_OPT, comma_names, emit
from geosteer.cli.outputs import out_artifact
from geosteer.errors import GeosteerError


def _names(spec: str, option: str) -> list[str] | None:
    """'all' -> None (every task), 'none' -> [], else the comma-separated names (at least one, each once)."""
    if spec == "all":
        return None
    if spec == "none":
        return []
    return comma_names(option, spec, empty="no task; give task names, 'all' or 'none'", each="each task")


def build_cmd(
    out: Path = typer.Option(..., "--out", help="folder to write (a task folder built before is replaced "
                              "atomically; any other existing folder is refused)",
                              callback=out_artifact("geosteer-tasks")),
    model: str = typer.Option("smollm2", "--model", "-m", help="model whose tokenizer counts the lengths"),
    lengths: str = typer.Option("1024,2048", help="context lengths in tokens, comma-separated"),
    ruler_tasks: str = typer.Option("all", help="comma-separated RULER-style tasks, 'all' or 'none'"),
    ruler_n: int = typer.Option(20, help="examples per RULER task and length"),
    proxy_tasks: str = typer.Option("all", help="comma-separated proxy tasks, 'all' or 'none'"),
    proxy_n: int = typer.Option(200, help="items per proxy task"),
    seed: int = typer.Option(0),
    as_json: bool = JSON_OPT,
) -> None:
    """Generate the tasks (deterministic: same seed, same bytes); run them with
    ``geosteer eval --model geosteer --include_path OUT --tasks geosteer_ruler_1024,geosteer_proxy ...``
    (lm-eval's command line with the geosteer model registered; docs/tasks.md)."""
    from geosteer.tasks.build import build, check_counts

    try:
        lens = [int(x) for x in lengths.split(",") if x.strip()]
    except ValueError:
        raise GeosteerError(f"--lengths takes integers separated by commas (got {lengths!r})") from None
    check_counts(ruler_n, proxy_n, lens)  # before the tokenizer loads
    ruler, proxy = _names(ruler_tasks, "--ruler-tasks"), _names(proxy_tasks, "--proxy-tasks")
    if ruler == [] and proxy == []:
        raise GeosteerError("--ruler-tasks none and --proxy-tasks none build nothing; give at least one task")
    m = build(out, model=model, lengths=lens, ruler_tasks=ruler, ruler_n=ruler_n, proxy_tasks=proxy,
              proxy_n=proxy_n, seed=seed)
    emit({"out": str(out), "tasks": m["tasks"]} if as_json else
         {"out": str(out), "tasks": ", ".join(f"{k} ({v})" for k, v in m["tasks"].items())}, as_json)


def register(app: typer.Typer) -> None:
    """Add ``geosteer tasks build``."""
    tasks_app = typer.Typer(no_args_is_help=True, help="Local lm-eval tasks: RULER-style retrieval and "
                                                       "multiple-choice proxies from the bundled corpus.")
    tasks_app.command("build")(build_cmd)
    app.add_typer(tasks_app, name="tasks")
