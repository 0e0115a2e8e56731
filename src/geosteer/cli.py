"""The ``geosteer`` command. Core verbs live here; each method package adds its own via ``register(app)``.

User errors (``GeosteerError``, ``ValueError``, missing files) print one line ``error: …`` and exit 2.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import typer

from geosteer.errors import GeosteerError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Geometric steering and analysis of pretrained language models.")

MODEL_OPT = typer.Option("smollm2", "--model", "-m", help="smollm2 | gemma3-270m | tiny-<family> | path | hub id")


def emit(obj, as_json: bool, table_title: str | None = None) -> None:
    """Print ``obj`` as JSON (``--json``) or as a small rich table / key: value lines."""
    if as_json:
        typer.echo(json.dumps(obj, indent=2, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if isinstance(obj, list) and obj and isinstance(obj[0], dict):
        t = Table(title=table_title)
        for k in obj[0]:
            t.add_column(str(k))
        for row in obj:
            t.add_row(*[_fmt(v) for v in row.values()])
        console.print(t)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            console.print(f"{k}: {_fmt(v)}")
    else:
        console.print(obj)


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


FORCE_OPT = typer.Option(False, "--force", help="use artifacts recorded for another base model anyway")


def interventions_from_options(model, surfaces: Path | None = None, force: bool = False) -> list:
    """Interventions named on the command line (the method packages add their options here).

    ``force``: accept an artifact whose recorded base model is not ``model`` (shapes must still fit).
    """
    out = []
    if surfaces is not None:
        from geosteer.manifold import load as load_surfaces

        out.append(load_surfaces(surfaces, model=model, force=force))
    return out


_METHOD_CLIS = ("geosteer.eval.cli", "geosteer.manifold.cli", "geosteer.directional.cli",
                "geosteer.dynamics.cli", "geosteer.viz.cli", "geosteer.studio.cli", "geosteer.demo")


def _register_methods() -> None:
    for name in _METHOD_CLIS:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name == name:
                continue  # that method has no CLI yet
            raise
        mod.register(app)


@app.callback()
def _root() -> None:
    """geosteer: attention manifolds, directional decomposition, FFN steering field."""


@app.command()
def info(model: str = MODEL_OPT, as_json: bool = typer.Option(False, "--json")) -> None:
    """The model's anatomy: shapes, block wiring and per-layer parts."""
    from geosteer import anatomy, load_model

    m, _ = load_model(model)
    an = anatomy(m)
    if as_json:
        emit({"summary": an.summary(), "layers": an.table()}, True)
    else:
        emit(an.summary(), False)
        emit(an.table(), False, table_title="blocks")


_register_methods()


def main() -> None:
    try:
        app(standalone_mode=False)
    except GeosteerError as e:
        typer.echo(f"error: {e}", err=True)
        sys.exit(2)
    except (ValueError, FileNotFoundError, IsADirectoryError, PermissionError) as e:
        typer.echo(f"error: {e}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
    except Exception as e:  # click (vendored by typer) usage errors arrive here in non-standalone mode
        name = type(e).__name__
        if name == "Exit":
            sys.exit(getattr(e, "exit_code", 0))
        if hasattr(e, "show") and hasattr(e, "exit_code"):
            e.show()
            sys.exit(e.exit_code)
        if name == "Abort":
            sys.exit(1)
        raise


if __name__ == "__main__":
    main()
