"""``geosteer serve``: an OpenAI-compatible vLLM server for the stock model and named recipes."""

from __future__ import annotations

import importlib.util
import json
import os

import typer

from geosteer.errors import GeosteerError
from geosteer.models.loading import BUNDLED
from geosteer_vllm.families import SERVED_FAMILIES
from geosteer_vllm.inline import Policy

SETUP = ("geosteer serve needs vLLM, which lives in its own environment: run `make serve` in the geosteer "
         "checkout, then `.venv-serve/bin/geosteer serve -m MODEL --recipe NAME=DIR --port P` (docs/serving.md)")

HELP = f"""Serve MODEL and each --recipe NAME=DIR (a recipe, surfaces, gates or steering-vectors folder)
through vLLM's OpenAI-compatible server: the names are the `model` ids in /v1/models; a request picks a
recipe by its `model` field or, with the base model's id, by an extra `geosteer_recipe` field (a name, or an
object of recipe keys as --set takes them). The steering runs inside vLLM's compiled graph when every recipe
can; exact walls, surfaces off vLLM's CPU build and --max-capture run the engine eager, and the log line
`geosteer: ...` says which and why. Set-up: {SETUP.split(': ', 1)[1]}.
Arguments after `--` go to vLLM unchanged (e.g. -- --max-model-len 2048; -- --tensor-parallel-size 2 splits
every recipe over the ranks by attention heads)."""
MODEL_HELP = (f"{' | '.join(BUNDLED)} | a Hugging Face model folder (config.json) of a served family: "
              f"{', '.join(SERVED_FAMILIES)} (model_type)")


def vllm_argv(model: str, recipes: dict[str, str], host: str, port: int, memory: float,
              extra: list[str], inline: Policy | None = None, max_capture: int | None = None) -> tuple[list[str], dict]:
    """(vLLM server arguments, routes for the recipe router) for ``model``, ``recipes``, ``inline`` and
    ``max_capture``."""
    from geosteer_vllm.engine import engine_args, tensor_parallel_size

    kw = engine_args(model, recipes, tensor_parallel_size(extra), inline, max_capture)  # checked before vLLM
    served = served_name(model)
    argv = ["--model", kw["model"], "--dtype", kw["dtype"], "--served-model-name", served, "--host", host,
            "--port", str(port), "--gpu-memory-utilization", str(memory),
            "--middleware", "geosteer_vllm.router.RecipeRouter"]
    if "hf_overrides" in kw:
        argv += ["--hf-overrides", json.dumps(kw["hf_overrides"])]
    if kw.get("enforce_eager"):  # steering that cannot run inside vLLM's compiled graph (serve.graph)
        argv += ["--enforce-eager"]
    if "additional_config" in kw:
        argv += ["--additional-config", json.dumps(kw["additional_config"])]
    return argv + list(extra), {"base": served, "recipes": list(recipes)}


def served_name(model: str) -> str:
    """The OpenAI model id of the base model: a geosteer alias as given, a folder's name."""
    from pathlib import Path

    from geosteer.models.loading import BUNDLED

    return model if model in BUNDLED else Path(model).resolve().name


def serve(
    ctx: typer.Context,
    model: str = typer.Option("smollm2", "--model", "-m", help=MODEL_HELP),
    recipe: list[str] = typer.Option([], "--recipe", help="NAME=DIR, repeatable: a recipe to serve as model "
                                     "id NAME"),
    artifact: list[str] = typer.Option([], "--artifact", help="NAME=DIR, repeatable: an artifact that inline "
                                       "recipes may name by NAME in a folder key (e.g. vectors)"),
    allow_root: list[str] = typer.Option([], "--allow-root", help="DIR, repeatable: inline recipes may name "
                                         "artifact folders under DIR"),
    inline: bool = typer.Option(True, "--inline/--no-inline", help="take inline recipes (objects of recipe "
                                "keys in geosteer_recipe); --no-inline without --recipe serves stock vLLM "
                                "with its compiled graphs"),
    admin_token: str = typer.Option("", "--admin-token", envvar="GEOSTEER_ADMIN_TOKEN", show_default=False,
                                    help="bearer token of POST/GET/DELETE /v1/geosteer/recipes (recipes added "
                                    "while the server runs); unset: those endpoints are off"),
    max_capture: int = typer.Option(0, "--max-capture", min=0, help="return activations a request asks for "
                                    "(geosteer_capture), at most this many values per request (layers x "
                                    "tokens x width; the engine then runs eager); 0: captures off"),
    host: str = typer.Option("127.0.0.1", "--host", help="address to listen on"),
    port: int = typer.Option(8000, "--port", min=1, max=65535, help="port to listen on"),
    memory: float = typer.Option(0.15, "--gpu-memory-utilization", min=0.01, max=1.0,
                                 help="vLLM's memory fraction (on the CPU build: of the RAM)"),
) -> None:
    from geosteer_vllm.inline import check_roots, parse_artifact_args
    from geosteer_vllm.plan import parse_recipe_args

    recipes = parse_recipe_args(recipe, served_name(model))
    policy = Policy(parse_artifact_args(artifact), check_roots(allow_root))
    if not inline and (artifact or allow_root):
        raise GeosteerError("--artifact and --allow-root are for inline recipes; drop them or --no-inline")
    if admin_token and not inline:
        raise GeosteerError("--admin-token adds recipes as inline ones; drop it or --no-inline")
    if importlib.util.find_spec("vllm") is None:
        raise GeosteerError(SETUP)
    argv, routes = vllm_argv(model, recipes, host, port, memory, ctx.args, policy if inline else None,
                             max_capture or None)
    os.environ["GEOSTEER_SERVE_ROUTES"] = json.dumps(routes)
    if admin_token:
        os.environ["GEOSTEER_ADMIN_TOKEN"] = admin_token
    else:
        os.environ.pop("GEOSTEER_ADMIN_TOKEN", None)
    _run_vllm(argv)


def register(app: typer.Typer) -> None:
    """Add ``geosteer serve``."""
    app.command("serve", help=HELP, context_settings={"allow_extra_args": True})(serve)


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
