"""What every ``geosteer`` verb shares: the common options, ``emit``, model loading, and error handling.

Method packages build their verbs from these (``from geosteer.cli.common import MODEL_OPT, emit, ...``) so
that ``--model``, ``--threads``, ``--device``, ``--dtype`` and ``--json`` read the same everywhere, and
a user error prints one line ``error: …`` and exits 2. Only CLI modules import this (and typer).
"""

from __future__ import annotations

import json
import sys

import typer

from geosteer.errors import GeosteerError

MODEL_HELP = "smollm2 | gemma3-270m | tiny-<family> | .gguf file | folder | hub id"
MODEL_OPT = typer.Option("smollm2", "--model", "-m", help=MODEL_HELP)
THREADS_OPT = typer.Option(0, "--threads", help="torch CPU threads (0: torch's default)")
DEVICE_OPT = typer.Option("cpu", "--device", help="torch device for the model: cpu | cuda | cuda:N | mps")
DTYPE_OPT = typer.Option("float32", "--dtype", help="model weights dtype: float32 | bfloat16 | float16 | auto")
JSON_OPT = typer.Option(False, "--json", help="print JSON")
FORCE_OPT = typer.Option(False, "--force", help="use artifacts recorded for another base model anyway")


def set_threads(threads: int | None) -> None:
    """``torch.set_num_threads(threads)`` when given (0 or None keeps torch's default)."""
    if threads:
        if threads < 0:
            raise GeosteerError(f"--threads must be >= 0 (got {threads})")
        import torch

        torch.set_num_threads(threads)


def load(model: str, *, threads: int | None = None, device: str = "cpu", dtype: str = "float32"):
    """Set the thread count and return ``load_model(model, dtype=..., device=...)`` → (model, tokenizer)."""
    from geosteer.models.loading import load_model

    set_threads(threads)
    return load_model(model, dtype=dtype, device=device)  # load_model checks both (one-line errors)


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


USER_ERRORS = (GeosteerError, ValueError, FileNotFoundError, IsADirectoryError, PermissionError)


def run_app(app: typer.Typer, args: list[str] | None = None) -> None:
    """Run a typer app: user errors print one line ``error: …`` and exit 2; usage errors as click shows them."""
    try:
        app(args=args, standalone_mode=False)
    except USER_ERRORS as e:
        typer.echo(f"error: {e}", err=True)
        sys.exit(2)
    except ModuleNotFoundError as e:  # an optional package imported inside a verb: name its extra
        from geosteer.extras import hint

        msg = hint(e.name or "")
        if msg is None:
            raise
        typer.echo(f"error: {msg}", err=True)
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
