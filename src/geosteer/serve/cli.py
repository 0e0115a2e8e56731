"""``geosteer serve``: an OpenAI-compatible vLLM server for the stock model and named recipes."""

from __future__ import annotations

import importlib.util
import json
import os

import typer

from geosteer.cli.common import MODEL_OPT
from geosteer.errors import GeosteerError

SETUP = ("geosteer serve needs vLLM, which lives in its own environment: run `make serve` in the geosteer "
         "checkout, then `.venv-serve/bin/geosteer serve -m MODEL --recipe NAME=DIR --port P` (docs/serving.md)")

HELP = f"""Serve MODEL and each --recipe NAME=DIR (a recipe, surfaces or gates folder) through vLLM's
OpenAI-compatible server: the names are the `model` ids in /v1/models; a request picks a recipe by its
`model` field or, with the base model's id, by an extra `geosteer_recipe` field. Set-up: {SETUP.split(': ', 1)[1]}.
Arguments after `--` go to vLLM unchanged (e.g. -- --max-model-len 2048)."""


def vllm_argv(model: str, recipes: dict[str, str], host: str, port: int, memory: float,
              extra: list[str]) -> tuple[list[str], dict]:
    """(vLLM server arguments, routes for the recipe router) for ``model`` and ``recipes``."""
    from pathlib import Path

    from geosteer.serve.engine import engine_args, tensor_parallel_size

    kw = engine_args(model, recipes, tensor_parallel_size(extra))  # every recipe checked here, before vLLM
    served = model if kw["model"] != str(Path(model).resolve()) else Path(kw["model"]).name
    argv = ["--model", kw["model"], "--dtype", kw["dtype"], "--served-model-name", served, "--host", host,
            "--port", str(port), "--gpu-memory-utilization", str(memory),
            "--middleware", "geosteer.serve.router.RecipeRouter"]
    if recipes:
        argv += ["--enforce-eager", "--no-enable-prefix-caching", "--hf-overrides", json.dumps(kw["hf_overrides"])]
    return argv + list(extra), {"base": served, "recipes": list(recipes)}


def register(app: typer.Typer) -> None:
    """Add ``geosteer serve``."""

    @app.command("serve", help=HELP, context_settings={"allow_extra_args": True})
    def serve(
        ctx: typer.Context,
        model: str = MODEL_OPT,
        recipe: list[str] = typer.Option([], "--recipe", help="NAME=DIR, repeatable: a recipe to serve as model "
                                         "id NAME"),
        host: str = typer.Option("127.0.0.1", "--host", help="address to listen on"),
        port: int = typer.Option(8000, "--port", min=1, max=65535, help="port to listen on"),
        memory: float = typer.Option(0.15, "--gpu-memory-utilization", min=0.01, max=1.0,
                                     help="vLLM's memory fraction (on the CPU build: of the RAM)"),
    ) -> None:
        from geosteer.serve.plan import parse_recipe_args

        if importlib.util.find_spec("vllm") is None:
            raise GeosteerError(SETUP)
        recipes = parse_recipe_args(recipe)
        argv, routes = vllm_argv(model, recipes, host, port, memory, ctx.args)
        os.environ["GEOSTEER_SERVE_ROUTES"] = json.dumps(routes)
        _run_vllm(argv)


def _run_vllm(argv: list[str]) -> None:
    import uvloop
    from vllm.entrypoints.launchers.api_server.entry import run_server
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(prog="geosteer serve"))
    args = parser.parse_args(argv)
    if getattr(args, "api_server_count", None) is None:
        args.api_server_count = 1  # what `vllm serve` picks without data parallelism
    validate_parsed_serve_args(args)
    uvloop.run(run_server(args))
