"""What every ``geosteer`` verb shares: the common options, ``emit``, model loading, and error handling.

Method packages build their verbs from these (``from geosteer.cli.common import MODEL_OPT, emit, ...``) so
that ``--model``, ``--threads``, ``--device``, ``--dtype`` and ``--json`` read the same everywhere, and
a user error prints one line ``error: …`` and exits 2. Only CLI modules import this (and typer).
"""

from __future__ import annotations

import json
import math
import sys
from functools import lru_cache

import typer

from geosteer.errors import GeosteerError

MODEL_HELP = "smollm2 | gemma3-270m | qwen2.5-0.5b | qwen2.5-1.5b | tiny-<family> | .gguf file | folder | hub id"
MODEL_OPT = typer.Option("smollm2", "--model", "-m", help=MODEL_HELP)
THREADS_OPT = typer.Option(0, "--threads", help="torch CPU threads (0: the cores the 1-minute load average "
                           "leaves free, at least 1, at most torch's default; OMP_NUM_THREADS wins when set). Idle "
                           "threads sleep instead of spinning on cores other work holds (OMP_WAIT_POLICY=PASSIVE "
                           "unless you set it)")


def _known_device(value: str) -> str:
    """``--device``: refused at once (one line) when this machine has no such device."""
    from geosteer.models.loading import resolve_device

    resolve_device(value)
    return value


def _known_dtype(value: str) -> str:
    """``--dtype``: refused at once (one line naming the valid names) when it names no dtype."""
    from geosteer.models.loading import resolve_dtype

    resolve_dtype(value)
    return value


DEVICE_OPT = typer.Option("cpu", "--device", help="torch device for the model: cpu | cuda | cuda:N | mps",
                          callback=_known_device)
DTYPE_OPT = typer.Option("float32", "--dtype", help="model weights dtype: float32 | bfloat16 | float16 | auto",
                         callback=_known_dtype)


def _json_quiets_progress(value: bool) -> bool:
    """``--json``: no progress bars (stdout is for the JSON; bars go to stderr only on a terminal anyway)."""
    if value:
        from geosteer.progress import quiet

        quiet()
    return value


JSON_OPT = typer.Option(False, "--json", help="print JSON (no progress bars)", callback=_json_quiets_progress)
FORCE_OPT = typer.Option(False, "--force", help="use artifacts recorded for another base model anyway")
BASE_MODEL_OPT = typer.Option(None, "--base-model", help="what a fine-tuned --model folder derives from (smollm2, "
                              "a Hub id): artifacts made for that base load on it without --force")

CHAT_OPT = typer.Option(False, "--chat", help="format every prompt with the tokenizer's chat template (a user "
                        "message; the continuation is the assistant's reply)")
SYSTEM_OPT = typer.Option(None, "--system", help="system prompt of the chat template (with --chat)")

MAX_SEEDS = 1000  # seeded samples per prompt at most (each one is a full generation)


@lru_cache(maxsize=1)
def _torch_default_threads() -> int:
    import torch

    return torch.get_num_threads()


def set_threads(threads: int | None) -> None:
    """``torch.set_num_threads(threads)`` when given; 0 or None: the cores the machine's load leaves free
    (:func:`geosteer.threads.threads_for_load`), unless ``OMP_NUM_THREADS`` is set (then torch's default)."""
    import os

    if threads is not None and threads < 0:
        raise GeosteerError(f"--threads must be >= 0 (got {threads})")
    import torch

    if threads:
        torch.set_num_threads(threads)
    elif not os.environ.get("OMP_NUM_THREADS"):
        from geosteer.threads import threads_for_load

        torch.set_num_threads(threads_for_load(_torch_default_threads()))


def load(model: str, *, threads: int | None = None, device: str = "cpu", dtype: str = "float32",
         base_model: str | None = None):
    """Set the thread count and return ``load_model(model, dtype=..., device=..., base_model=...)`` →
    (model, tokenizer)."""
    from geosteer.models.loading import load_model

    set_threads(threads)
    # load_model checks device and dtype (one-line errors)
    return load_model(model, dtype=dtype, device=device, base_model=base_model)


@lru_cache(maxsize=8)
def model_config(model: str):
    """The config of ``--model`` read without building weights (``None`` when that needs the model)."""
    from geosteer.models.limits import config_of

    return config_of(model)


def check_positions(model: str, option: str, length: int) -> None:
    """Refuse ``option`` (e.g. ``--context``) when its window of ``length`` tokens is longer than the
    positions of ``--model``, checked on the config before any weights are built."""
    from geosteer.models.limits import check_positions as check

    check(model_config(model), length, option)


def check_layers(model: str, option: str, spec: str | None) -> None:
    """Refuse a bad layer list in ``option`` before the model loads: its syntax always, its range when the
    config of ``--model`` names the number of layers."""
    from geosteer.models.anatomy import parse_layers
    from geosteer.models.limits import num_layers

    if spec is None:
        return
    n = num_layers(model_config(model)) if model_config(model) is not None else None
    try:
        parse_layers(spec, n if n is not None else 1 << 30)
    except ValueError as e:
        raise GeosteerError(f"{option}: {e}") from None


def check_token_rank(model: str, option: str, rank: int) -> None:
    """Refuse a next-token rank in ``option`` (``--target-rank``: 0 = the top token) below 0, or not below
    the vocabulary size when the config of ``--model`` names it, before the model loads."""
    from geosteer.models.limits import vocab_size

    cfg = model_config(model)
    n = vocab_size(cfg) if cfg is not None else None
    if rank < 0 or (n is not None and rank >= n):
        valid = f"0 to {n - 1}" if n is not None else ">= 0"
        raise GeosteerError(f"{option} {rank} is not a next-token rank of this model; valid: {valid} "
                            "(0 = the top token)")


def check_head_list(model: str, option: str, spec: str | int | None) -> None:
    """Refuse a bad head list in ``option`` (``'all'``, ``'0-3'``, ``'0,5'``) before the model loads: its
    syntax always, its range when the config of ``--model`` names the number of heads."""
    from geosteer.models.anatomy import parse_indices
    from geosteer.models.limits import num_heads

    if spec is None or str(spec).strip().lower() == "all":
        return
    cfg = model_config(model)
    n = num_heads(cfg) if cfg is not None else None
    try:
        parse_indices(str(spec), n, "head")
    except ValueError as e:
        raise GeosteerError(f"{option}: {e}") from None


def emit(obj, as_json: bool, table_title: str | None = None) -> None:
    """Print ``obj`` as JSON (``--json``) or as a small rich table / key: value lines."""
    if as_json:
        typer.echo(json.dumps(obj, indent=2, default=str))
        return
    from rich.table import Table

    from geosteer.terminal import console as make_console

    console = make_console()  # piped: 100 columns, cells folded, never cut
    if isinstance(obj, list) and obj and isinstance(obj[0], dict):
        t = Table(title=table_title)
        for k in obj[0]:
            t.add_column(str(k), overflow="fold")
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


def _base_annotation(annotation):
    """``float`` for ``float``, ``float | None``, ``list[float]`` and ``tuple[float, float]``; else as given."""
    import typing

    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if args and all(a is args[0] for a in args):
        return _base_annotation(args[0])
    return annotation


def _check_value(param, value) -> None:
    kind = _base_annotation(param.type_descriptor.annotation)
    items = value if isinstance(value, (list, tuple)) else [value]
    name = param.opts[0] if param.opts else param.name
    for v in items:
        if kind is float and isinstance(v, float) and not math.isfinite(v):
            raise GeosteerError(f"{name} must be a finite number (got {v})")
        if kind is str and isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:  # bytes of the command line that are not UTF-8 arrive as surrogates
                raise GeosteerError(f"{name} is not valid UTF-8 text (an undecodable byte on the command "
                                    "line)") from None


def _checked(param):
    original = param.callback

    def callback(ctx, p, value):
        _check_value(p, value)
        return original(ctx, p, value) if original is not None else value

    return callback


def harden(command) -> None:
    """The rules every option of every verb shares, added to the built click command tree: a number
    option must be finite (``nan``/``inf`` refused), a text option valid UTF-8."""
    for sub in getattr(command, "commands", {}).values():
        harden(sub)
    for param in getattr(command, "params", []):
        if hasattr(param, "type_descriptor"):
            param.callback = _checked(param)


def build_command(app: typer.Typer):
    """The click command tree of ``app`` with the shared rules of :func:`harden` added."""
    command = typer.main.get_command(app)
    harden(command)
    return command


def run_app(app: typer.Typer, args: list[str] | None = None) -> None:
    """Run a typer app: user errors print one line ``error: …`` and exit 2, usage errors too."""
    run_command(build_command(app), args)


def run_command(command, args: list[str] | None = None) -> None:
    """Run a built command tree (:func:`build_command`) with :func:`run_app`'s error handling."""
    from geosteer.cli.renamed import renamed_line

    line = renamed_line(list(sys.argv[1:] if args is None else args))
    if line is not None:  # a former spelling: say the current one
        typer.echo(f"error: {line}", err=True)
        sys.exit(2)
    try:
        command.main(args=args, standalone_mode=False)
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
        from geosteer.errors import disk_full_line, is_disk_full

        if is_disk_full(e):  # a write no writer named (they raise DiskFull with the path and the space)
            typer.echo(f"error: {disk_full_line(e)}", err=True)
            sys.exit(2)
        name = type(e).__name__
        if name == "Exit":
            sys.exit(getattr(e, "exit_code", 0))
        if name == "NoArgsIsHelpError":
            e.show()
            sys.exit(e.exit_code)
        if hasattr(e, "format_message") and hasattr(e, "exit_code"):
            message = " ".join(e.format_message().split())
            typer.echo(f"error: {message}", err=True)
            sys.exit(e.exit_code)
        if name == "Abort":
            sys.exit(1)
        raise



def comma_names(option: str, value: str, *, empty: str = "nothing; give comma-separated names",
                each: str = "each") -> list[str]:
    """The comma-separated names of ``option``'s ``value``; none at all (``{option} {value!r} names
    {empty}``) or one given twice (``give {each} once``) refused in one line."""
    names = [n.strip() for n in value.split(",") if n.strip()]
    if not names:
        raise GeosteerError(f"{option} {value!r} names {empty}")
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise GeosteerError(f"{option} names {dup!r} twice; give {each} once")
    return names
