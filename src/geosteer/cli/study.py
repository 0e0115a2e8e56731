"""``geosteer study``: the paper studies and the reproduction report built from their results files.

Sub-commands live on :data:`study_app`; a method package adds its own with ``study_app.command()`` or
``study_app.add_typer(...)``, and ``geosteer study --list`` shows them all."""

from __future__ import annotations

from pathlib import Path

import typer

from geosteer.cli.common import emit
from geosteer.errors import GeosteerError

study_app = typer.Typer(no_args_is_help=False, invoke_without_command=True,
                        help="Paper studies and the reproduction report (--list: what can run).")

_SUFFIX = {"markdown": (".md", ".markdown"), "json": (".json",), "html": (".html", ".htm")}


@study_app.callback()
def _study(ctx: typer.Context, list_: bool = typer.Option(False, "--list", help="list what `geosteer study` "
                                                          "can run, and exit")) -> None:
    """Paper studies and the reproduction report."""
    if list_:
        group = ctx.command
        rows = [{"study": name, "what": (cmd.get_short_help_str(limit=100) or "")}
                for name, cmd in sorted(group.commands.items())]
        emit(rows, False, table_title="geosteer study")
        raise typer.Exit()
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit()


def _command_line(results_root: Path | None, items: list[Path] | None, fmt: str, out: Path) -> str:
    parts = ["geosteer study report"]
    if results_root is not None:
        parts.append(f"--results-root {results_root}")
    parts += [f"--items {p}" for p in items or []]
    parts += {"markdown": [], "json": ["--json"], "html": ["--html"]}[fmt]
    return " ".join(parts + [f"--out {out}"])


def _check_out(out: Path, fmt: str) -> None:
    from geosteer.io_utils import check_output_path

    check_output_path(out, what="--out", suffixes=_SUFFIX[fmt])


@study_app.command("report")
def report_cmd(
    out: Path = typer.Option(..., "--out", help="file to write: .md (default), .json with --json, .html with "
                                                "--html"),
    results_root: Path | None = typer.Option(None, "--results-root", help="folder the results files are read "
                                             "from: a repository root, or its docs/results (default: the "
                                             "current folder)"),
    as_json: bool = typer.Option(False, "--json", help="one JSON record per item"),
    as_html: bool = typer.Option(False, "--html", help="a self-contained HTML page"),
    items: list[Path] | None = typer.Option(None, "--items", help="item files to use instead of the shipped "
                                            "ones (repeatable)"),
) -> None:
    """Build the reproduction report: every paper item with its status computed from the results files."""
    from geosteer.io_utils import atomic_write_text
    from geosteer.reproduction import evaluate_items, load_items, report_html, report_json, report_markdown

    if as_json and as_html:
        raise GeosteerError("--json and --html: give at most one (default: markdown)")
    fmt = "json" if as_json else "html" if as_html else "markdown"
    _check_out(out, fmt)
    if results_root is not None and not results_root.is_dir():
        raise GeosteerError(f"--results-root {results_root} is not a folder")
    for p in items or []:
        if not p.is_file():
            raise GeosteerError(f"--items {p}: no such file")
    papers = load_items(list(items) if items else None)
    results = evaluate_items(papers, [results_root or Path.cwd()])
    command = _command_line(results_root, items, fmt, out)
    titles = {p.paper: f"Paper {p.number}: {p.title}" for p in papers}
    text = {"markdown": lambda: report_markdown(results, command, titles),
            "json": lambda: report_json(results, command),
            "html": lambda: report_html(results, command, titles)}[fmt]()
    atomic_write_text(out, text)
    from geosteer.reproduction.evaluate import counts

    total = counts(results)[-1]
    emit({"wrote": str(out), **{k: v for k, v in total.items() if k != "paper"}}, False)


def register(app: typer.Typer) -> None:
    """Add the ``geosteer study`` group."""
    app.add_typer(study_app, name="study")
