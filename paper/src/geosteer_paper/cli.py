"""``geosteer study``: the paper studies, the formula checks and the reproduction report built from their results
files, added to the ``geosteer`` command through the ``geosteer.cli`` entry-point group (:func:`register`).

Sub-commands live on :data:`study_app`: ``report``, ``checks`` and a group per method with studies
(:mod:`geosteer_paper.study_methods`); ``geosteer study --list`` shows them all."""

from __future__ import annotations

from pathlib import Path

import typer

from geosteer.cli.common import emit
from geosteer.cli.outputs import HTML, out_file
from geosteer.errors import GeosteerError
from geosteer.io_utils import atomic_write_text, write_records
from geosteer_paper.registry import studies
from geosteer_paper.reproduction import evaluate_items, load_items, report_html, report_json, report_markdown
from geosteer_paper.reproduction.checks import declared_checks, run_checks, select
from geosteer_paper.reproduction.evaluate import counts
from geosteer_paper.reproduction.ladder import evaluate_ladder, ladder_markdown, load_ladder
from geosteer_paper.study_methods import add_studies

study_app = typer.Typer(no_args_is_help=False, invoke_without_command=True,
                        help="Paper studies and the reproduction report (--list: what can run).")

@study_app.callback()
def _study(ctx: typer.Context, list_: bool = typer.Option(False, "--list", help="list what `geosteer study` "
                                                          "can run, and exit")) -> None:
    """Paper studies and the reproduction report."""
    if list_:
        emit(_listing(ctx.command), False, table_title="geosteer study")
        raise typer.Exit()
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit()


def _listing(group) -> list[dict]:
    """Every leaf under ``geosteer study``: its path, the paper item a method's study declares, its help line."""
    papers = {f"{method} {s.name}": s.paper for method, declared in studies().items() for s in declared}
    rows = []
    for name, cmd in sorted(group.commands.items()):
        subs = getattr(cmd, "commands", None)
        leaves = sorted(subs.items()) if subs is not None else [(None, cmd)]
        for sub, leaf in leaves:
            path = f"{name} {sub}" if sub else name
            rows.append({"study": path, "paper": papers.get(path, ""),
                         "what": (leaf.help or "").strip().partition("\n")[0]})
    return rows


def _command_line(results_root: Path | None, items: list[Path] | None, as_json: bool, out: Path | None,
                  html: Path | None) -> str:
    parts = ["geosteer study report"]
    if results_root is not None:
        parts.append(f"--results-root {results_root}")
    parts += [f"--items {p}" for p in items or []]
    parts += ["--json"] if as_json else []
    parts += [f"--out {out}"] if out is not None else []
    return " ".join(parts + ([f"--html {html}"] if html is not None else []))


@study_app.command("report")
def report_cmd(
    out: Path | None = typer.Option(None, "--out", help="the report: markdown (.md), or JSON records (.json) "
                                    "with --json", callback=out_file(".md", ".markdown", ".json")),
    html: Path | None = typer.Option(None, "--html", help="also (or only) a self-contained HTML page",
                                     callback=out_file(*HTML)),
    results_root: Path | None = typer.Option(None, "--results-root", help="folder the results files are read "
                                             "from: a repository root, or its docs/results (default: the "
                                             "current folder)"),
    as_json: bool = typer.Option(False, "--json", help="--out gets one JSON record per item"),
    items: list[Path] | None = typer.Option(None, "--items", help="item files to use instead of the shipped "
                                            "ones (repeatable)"),
) -> None:
    """Build the reproduction report: every paper item with its status computed from the results files."""
    if out is None and html is None:
        raise GeosteerError("give --out FILE (.md, or .json with --json) and/or --html FILE")
    if out is not None and (out.suffix.lower() == ".json") != as_json:
        raise GeosteerError(f"--out {out}: JSON records need --json and a .json name; markdown a .md name")
    if as_json and out is None:
        raise GeosteerError("--json writes the records to --out FILE.json; give --out")
    if results_root is not None and not results_root.is_dir():
        raise GeosteerError(f"--results-root {results_root} is not a folder")
    for p in items or []:
        if not p.is_file():
            raise GeosteerError(f"--items {p}: no such file")
    papers = load_items(list(items) if items else None)
    results = evaluate_items(papers, [results_root or Path.cwd()])
    command = _command_line(results_root, items, as_json, out, html)
    titles = {p.paper: f"Paper {p.number}: {p.title}" for p in papers}
    ladder = None if items else ladder_markdown(evaluate_ladder(load_ladder(), results_root or Path.cwd()))
    if out is not None:
        atomic_write_text(out, report_json(results, command) if as_json else
                          report_markdown(results, command, titles, ladder))
    if html is not None:
        atomic_write_text(html, report_html(results, command, titles))
    total = counts(results)[-1]
    wrote = [str(p) for p in (out, html) if p is not None]
    emit({"wrote": ", ".join(wrote), **{k: v for k, v in total.items() if k != "paper"}}, False)


def _names(text: str | None) -> list[str] | None:
    return [x.strip() for x in text.split(",") if x.strip()] if text else None


@study_app.command("checks")
def checks_cmd(
    out: Path | None = typer.Option(None, "--out", help="the records (.json: rows + meta; .csv: rows); the "
                                    "report reads docs/results/checks.json", callback=out_file(".json", ".csv")),
    only: str | None = typer.Option(None, "--only", help="only the checks of these paper items, e.g. 1.2,3.5 "
                                    "(default: every item a method declares a check for)"),
    families: str | None = typer.Option(None, "--families", help="only these tiny families, e.g. llama,gpt2 "
                                        "(default: each check's own)"),
    as_json: bool = typer.Option(False, "--json", help="print the records as JSON"),
) -> None:
    """Formula checks: each formula against an independent reference on the tiny families (max abs error).

    Exits 1 when a check is over its tolerance (the records are written first)."""
    import torch

    chosen = select(declared_checks(), _names(only), _names(families))
    rows = run_checks(chosen, _names(families))
    parts = ["geosteer study checks"] + [f"--{k} {v}" for k, v in (("only", only), ("families", families)) if v]
    meta = {"command": " ".join(parts + ([f"--out {out}"] if out else [])), "torch": torch.__version__,
            "seed": 0, "passed": sum(r["pass"] for r in rows), "checks": len(rows)}
    if out is not None:
        write_records(out, rows, meta)
    failed = [r for r in rows if not r["pass"]]
    emit(rows if as_json else {"checks": len(rows), "passed": len(rows) - len(failed),
                               "failed": ", ".join(f"{r['item']} {r['family']}" for r in failed) or "none",
                               **({"wrote": str(out)} if out else {})}, as_json)
    if failed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add the ``geosteer study`` group (with every method's studies) to ``app``; the entry point of the
    ``geosteer.cli`` group."""
    add_studies(study_app)
    if not any(g.typer_instance is study_app for g in app.registered_groups):
        app.add_typer(study_app, name="study")
