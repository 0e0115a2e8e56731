"""`geosteer study` from the paper package: every declared study under `geosteer study <method> <name>` with its
paper item, `--list`, and a study registered for another method (a plugin's) running there."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from geosteer.cli import register_clis
from geosteer_paper.registry import studies
from tests.cli_helpers import command_leaves, run_cli


def test_every_declared_study_is_under_geosteer_study_with_its_paper_item():
    leaves = command_leaves()
    declared = [(m, s) for m, ds in studies().items() for s in ds]
    assert len(declared) >= 21
    for m, s in declared:
        cmd = leaves[f"study {m} {s.name}"]
        assert not cmd.hidden and s.paper and f"Paper item: {s.paper}." in cmd.help


def test_study_list_names_every_study_and_its_paper_item(monkeypatch, capsys):
    monkeypatch.setattr("geosteer.terminal.PIPED_WIDTH", 1000)  # one line a row (piped it folds at 100 columns)
    code, out, _ = run_cli(monkeypatch, capsys, "study", "--list")
    assert code == 0
    lines = out.splitlines()
    for m, declared in studies().items():
        for s in declared:
            row = [ln for ln in lines if f" {m} {s.name} " in ln]
            assert len(row) == 1 and s.paper[:30] in row[0], (m, s.name)
    assert any(" report " in ln for ln in lines)


def plug_echo(word: str = typer.Option("hi", "--word")) -> None:
    """Echo a word (a plugin's study)."""
    typer.echo(f"plug: {word}")


def test_a_study_registered_for_another_method_runs_under_geosteer_study(monkeypatch):
    from geosteer_paper import study_methods
    from geosteer_paper.cli import study_app
    from geosteer_paper.registry import Study, register_study, unregister_study

    register_study("plug", Study("echo", "tests.paper.test_cli:plug_echo", paper="Fig. 0"))
    target = typer.Typer()
    try:
        register_clis(target)
        runner = CliRunner()
        new = runner.invoke(target, ["study", "plug", "echo", "--word", "x"])
        listed = runner.invoke(target, ["study", "--list"], env={"COLUMNS": "200"})
        helped = runner.invoke(target, ["study", "plug", "echo", "--help"], env={"COLUMNS": "200"})
    finally:
        unregister_study("plug", "echo")
        study_app.registered_groups[:] = [g for g in study_app.registered_groups if g.name != "plug"]
        study_methods._groups.pop("plug", None)
    assert new.exit_code == 0 and new.output == "plug: x\n"
    assert "plug echo" in listed.output and "Fig. 0" in listed.output
    assert "Paper item: Fig. 0." in helped.output
    assert "plug-echo" not in runner.invoke(target, ["--help"], env={"COLUMNS": "200"}).output


def test_without_the_paper_package_the_command_has_no_study_group(monkeypatch):
    """`geosteer study` comes from the `geosteer.cli` entry point alone: with no entry point, the tool verbs stay
    and the group is absent."""
    monkeypatch.setattr("geosteer.cli.entry_points", lambda group: [])
    bare, full = typer.Typer(), typer.Typer()
    register_clis(bare)
    monkeypatch.undo()
    register_clis(full)
    names = {g.name for g in bare.registered_groups}
    assert "manifold" in names and "study" not in names
    assert "study" in {g.name for g in full.registered_groups}
