"""``geosteer eval``: lm-evaluation-harness's own command line with ``--model geosteer`` registered.

lm-eval has no plugin entry point for models, so the plain ``lm_eval`` command does not know ``geosteer``;
this verb passes every argument to lm-eval unchanged after registering it.
"""

from __future__ import annotations

import typer

_HELP = ("lm-evaluation-harness with `--model geosteer` registered: every argument goes to lm-eval "
         "unchanged (`geosteer eval --help` prints lm-eval's options). Needs the eval extra.")


def register(app: typer.Typer) -> None:
    """Add ``geosteer eval``."""

    @app.command("eval", help=_HELP, add_help_option=False,
                 context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
    def eval_(ctx: typer.Context) -> None:
        from geosteer.extras import require

        require("lm_eval")
        from geosteer.integrations.lm_eval import main

        args = list(ctx.args)
        if not args or args in (["-h"], ["--help"]):
            typer.echo("geosteer eval = lm-eval's command line with `--model geosteer` registered; "
                       "lm-eval's own help (`run`, its default subcommand) follows.\n")
            args = ["run", "--help"]
        main(args)
