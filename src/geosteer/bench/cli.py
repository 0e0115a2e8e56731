"""``geosteer bench``: the benchmarks a user runs on their own model (``decide``, ``text``, ``judge``)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    bench = typer.Typer(no_args_is_help=True, help="Benchmarks a user runs on their own model.")
    from geosteer.bench.cli_decide import decide_cmd

    bench.command("decide")(decide_cmd)
    from geosteer.bench.cli_text import text_cmd

    bench.command("text")(text_cmd)
    from geosteer.bench.cli_judge import judge_cmd

    bench.command("judge")(judge_cmd)
    app.add_typer(bench, name="bench")
