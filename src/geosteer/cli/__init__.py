"""The ``geosteer`` command. Core verbs live here; each method package adds its own via ``register(app)``.

User errors (``GeosteerError``, ``ValueError``, missing files) print one line ``error: …`` and exit 2.
Shared options, ``emit`` and the error handling live in :mod:`geosteer.cli.common`.
"""

from __future__ import annotations

import functools
import importlib
import re
import sys
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

import typer

from geosteer.cli.common import (  # noqa: F401 - FORCE_OPT re-exported for the method CLIs
    DEVICE_OPT,
    DTYPE_OPT,
    FORCE_OPT,
    JSON_OPT,
    MODEL_OPT,
    THREADS_OPT,
    emit,
    load,
    run_app,
)
from geosteer.cli.nouns import add_verbs
from geosteer.cli.once import refuse_repeats
from geosteer.errors import GeosteerError

__all__ = ["app", "main", "emit", "MODEL_OPT", "interventions_from_options"]

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Geometric steering and analysis of pretrained language models.")


def interventions_from_options(model, surfaces: Path | None = None, force: bool = False, *,
                               recipe: str | None = None, settings: list[str] | None = None) -> list:
    """Interventions named on the command line: ``--recipe``, ``--set key=value`` and ``--surfaces``
    (:func:`geosteer.cli.recipe.spec_from_options`), built by the registered methods.

    ``force``: accept an artifact whose recorded base model is not ``model`` (shapes must still fit).
    """
    from geosteer.cli.recipe import spec_from_options

    return spec_from_options(recipe, settings, surfaces).build(model, force=force)


_CORE_CLIS = ("geosteer.eval.cli", "geosteer.viz.cli", "geosteer.studio.cli", "geosteer.cli.demo",
              "geosteer.cli.tasks", "geosteer.cli.evaluate", "geosteer.cli.recipe",
              "geosteer.bench.cli", "geosteer.cli.show", "geosteer.cli.nouns")
ENTRY_POINT_GROUP = "geosteer.cli"  # installed packages add commands: an entry point naming `register(app)`
# verbs that a separate distribution adds, and how to install it: without it the verb says so
PLUGIN_VERBS = {"serve": ("geosteer-vllm", "vLLM for your hardware, then `pip install ./vllm-plugin` from a "
                          "geosteer checkout (or `make serve` there; docs/serving.md)"),
                "study": ("geosteer-paper", "`pip install ./paper` from a geosteer checkout (`make dev` does)")}
_registered: set[str] = set()
# the one line `geosteer --help` lists for each verb (its own --help keeps the full text); a verb not named
# here shows the first sentence of its help, parenthesised asides left out
SUMMARIES = {
    "push": "Upload an artifact folder to the Hugging Face Hub",
    "info": "A model's anatomy: shapes, block wiring, per-layer parts",
    "ppl": "Perplexity and bits per byte of a text or corpus split",
    "generate": "Continue one or more prompts, stock or steered",
    "compare": "Stock vs steered on a prompt set: changes, KL, samples",
    "report": "One self-contained HTML report from result files",
    "studio": "Local web app to see and edit surfaces live",
    "demo": "The main job: stock vs steered, side by side",
    "eval": "lm-evaluation-harness with --model geosteer registered",
    "show": "What an artifact holds: base model, settings, shapes",
    "serve": "Serve steered recipes through vLLM (geosteer-vllm)",
    "tasks": "Build local lm-eval tasks from the bundled corpus",
    "recipe": "Recipes: every setting of a run as key=value",
    "bench": "Steering benchmarks on your own model and concepts",
    "learn": "Learn an artifact on a frozen model",
    "measure": "Measure a model or its surfaces",
    "manifold": "Edit or import attention-manifold surfaces",
    "study": "The papers' studies and the reproduction report",
}
SUMMARY_CHARS = 60  # fits one line of an 80-column terminal beside the longest verb name


def summary(text: str | None) -> str:
    """One line for a verb's help: its first sentence without parenthesised asides, at most
    :data:`SUMMARY_CHARS` characters (cut at a word, with an ellipsis)."""
    first = re.split(r"(?<=[.!?])\s|\n\s*\n", (text or "").strip(), maxsplit=1)[0]
    first = " ".join(re.sub(r"\s*\([^()]*\)", "", first).split()).rstrip(".")
    if len(first) <= SUMMARY_CHARS:
        return first
    return first[: SUMMARY_CHARS - 1].rsplit(" ", 1)[0].rstrip(",;:") + "…"


def _one_line_summaries(target: typer.Typer) -> None:
    """Give every top-level verb of ``target`` a one-line ``short_help`` (:data:`SUMMARIES`, else
    :func:`summary` of its help) unless it has one."""
    for info in [*target.registered_commands, *target.registered_groups]:
        if info.short_help:
            continue
        name = getattr(info, "name", None) or (info.callback.__name__ if getattr(info, "callback", None) else "")
        if name in SUMMARIES:
            info.short_help = SUMMARIES[name]
            continue
        text = info.help or (info.callback.__doc__ if getattr(info, "callback", None) else None)
        if text is None and getattr(info, "typer_instance", None) is not None:
            text = info.typer_instance.info.help
        if text:
            info.short_help = summary(text if isinstance(text, str) else None)


def register_clis(target: typer.Typer | None = None) -> None:
    """Add the core verbs, every registered method's CLI (``Method.cli``: a module path with
    ``register(app)``, or such a function), its learners and measurements (``geosteer learn | measure``) and
    every entry point of the ``geosteer.cli`` group (a ``register(app)`` function of an installed package, e.g.
    ``geosteer study`` of geosteer-paper) to ``app``; methods registered later are added on the next call."""
    from geosteer.methods import methods

    target = target or app
    todo = [(name, name) for name in _CORE_CLIS]
    todo += [(f"method:{m.name}", m.cli) for m in methods().values() if m.cli is not None]
    todo += [(f"nouns:{m.name}", functools.partial(add_verbs, method=m))  # geosteer learn | measure <verb>
             for m in methods().values() if m.learners or m.measures]
    plugins = entry_points(group=ENTRY_POINT_GROUP)
    todo += [(f"plugin:{ep.name}", ep) for ep in plugins]
    for key, cli in todo:
        if key in _registered and target is app:
            continue
        if _importing_now(cli):
            continue  # imported first, it is importing this module now: added on the next call (main())
        try:
            register = _register_fn(cli)
        except ImportError as e:  # an installed plugin that cannot be imported must not take the CLI down
            if not isinstance(cli, EntryPoint):
                raise
            print(f"note: geosteer plugin '{cli.name}' ({cli.value}) not loaded: {e}", file=sys.stderr)
            if target is app:
                _registered.add(key)
            continue
        register(target)
        if target is app:
            _registered.add(key)
    _add_install_hints(target, {ep.name for ep in plugins})
    _one_line_summaries(target)
    refuse_repeats(target)


def _importing_now(cli: str | Callable | EntryPoint) -> bool:
    """A core verb module that was imported first and is importing this module now (not yet its
    ``register``), or a plugin with a module of its package still mid-import (e.g. a paper study module
    imported on its own): registering it now would import that module half made."""
    if isinstance(cli, str):
        module = sys.modules.get(cli)
        return module is not None and not hasattr(module, "register")
    if isinstance(cli, EntryPoint):
        root = cli.module.split(".")[0]
        return any(getattr(getattr(m, "__spec__", None), "_initializing", False)
                   for name, m in list(sys.modules.items()) if name == root or name.startswith(root + "."))
    return False


def _add_install_hints(target: typer.Typer, installed: set[str]) -> None:
    """A ``PLUGIN_VERBS`` verb whose distribution is not installed (no entry point of that name): one line
    naming what to install, exit 2."""
    present = {c.name or (c.callback.__name__ if c.callback else "") for c in target.registered_commands}
    present |= {g.name or "" for g in target.registered_groups} | installed
    for verb, (dist, how) in PLUGIN_VERBS.items():
        if verb in present:
            continue

        def missing(dist: str = dist, verb: str = verb, how: str = how) -> None:
            raise GeosteerError(f"`geosteer {verb}` comes with the {dist} package, which is not installed: "
                                f"install {how}")

        target.command(verb, help=f"(needs the {dist} package: {how})", add_help_option=False,
                       context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(missing)


def _register_fn(cli: str | Callable | EntryPoint) -> Callable[[typer.Typer], None]:
    """``register(app)`` of a module path, an entry point (imported only now) or the function itself."""
    if isinstance(cli, EntryPoint):
        return cli.load()
    return importlib.import_module(cli).register if isinstance(cli, str) else cli


def _version(value: bool) -> None:
    if value:
        from geosteer import __version__

        typer.echo(f"geosteer {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="print the version and exit")) -> None:
    """geosteer: attention manifolds, directional decomposition, FFN steering field."""


@app.command()
def push(folder: Path = typer.Argument(..., help="artifact folder (surfaces, gates, recipe)"),
         repo_id: str = typer.Argument(..., help="Hub repo id, org/name"),
         public: bool = typer.Option(False, "--public", help="create the repo public (default: private)"),
         revision: str | None = typer.Option(None, "--revision", help="branch to push to (default: main)"),
         message: str | None = typer.Option(None, "--message", help="commit message"),
         token: str | None = typer.Option(None, "--token", help="Hub token (default: huggingface_hub's login)"),
         ) -> None:
    """Upload an artifact folder (config, tensors, model card) to the Hugging Face Hub."""
    from geosteer.artifacts import push as push_artifact

    url = push_artifact(folder, repo_id, private=not public, token=token, commit_message=message,
                        revision=revision)
    emit({"pushed": str(folder), "repo": repo_id, "url": url}, False)


@app.command()
def info(model: str = MODEL_OPT, device: str = DEVICE_OPT, dtype: str = DTYPE_OPT,
         threads: int = THREADS_OPT, as_json: bool = JSON_OPT) -> None:
    """The model's anatomy: shapes, block wiring and per-layer parts."""
    from geosteer import anatomy

    m, _ = load(model, threads=threads, device=device, dtype=dtype)
    an = anatomy(m)
    if as_json:
        emit({"summary": an.summary(), "layers": an.table()}, True)
    else:
        emit(an.summary(), False)
        emit(an.table(), False, table_title="blocks")


register_clis()


def main() -> None:
    """Entry point of the ``geosteer`` console script."""
    register_clis()  # methods registered since import (plugins, tests)
    run_app(app)
