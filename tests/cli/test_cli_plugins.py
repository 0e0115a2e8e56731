"""CLI plugins (the ``geosteer.cli`` entry-point group): one that cannot be imported leaves a one-line note
and the other verbs working; an import error inside the library itself is not swallowed."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest
import typer
from typer.main import get_command

import geosteer.cli as cli


def test_a_plugin_that_cannot_be_imported_is_skipped_with_a_note(monkeypatch, capsys):
    broken = EntryPoint(name="broken", value="geosteer_no_such_module:register", group="geosteer.cli")
    monkeypatch.setattr(cli, "entry_points", lambda group: [broken] if group == "geosteer.cli" else [])
    target = typer.Typer()
    cli.register_clis(target)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "plugin 'broken' (geosteer_no_such_module:register) not loaded" in err
    assert {"ppl", "show", "learn"} <= set(get_command(target).commands)


def test_a_broken_core_module_is_not_swallowed(monkeypatch):
    monkeypatch.setattr(cli, "_CORE_CLIS", ("geosteer_no_such_core_module",))
    with pytest.raises(ImportError):
        cli.register_clis(typer.Typer())


def test_a_verb_of_a_missing_distribution_names_what_to_install(monkeypatch, capsys):
    """Without geosteer-vllm and geosteer-paper, ``serve`` and ``study`` still exist and say, in one line and
    exit 2 before any work, which package brings them."""
    from geosteer.cli.common import run_app

    monkeypatch.setattr(cli, "entry_points", lambda group: [])
    target = typer.Typer()
    cli.register_clis(target)
    assert {"serve", "study"} <= set(get_command(target).commands)
    for verb, dist in (("serve", "geosteer-vllm"), ("study", "geosteer-paper")):
        with pytest.raises(SystemExit) as exit_:
            run_app(target, [verb, "-m", "smollm2", "--port", "8000"])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.count("\n") == 1
        assert err.startswith(f"error: `geosteer {verb}` comes with the {dist} package") and "pip install" in err


def test_the_installed_plugins_bring_their_verbs_and_no_hint():
    """With the plugins installed (the dev set-up), ``serve`` and ``study`` are theirs, not the install hint."""
    target = typer.Typer()
    cli.register_clis(target)
    commands = get_command(target).commands
    assert "--recipe" in {o for p in commands["serve"].params for o in p.opts}
    assert "needs the" not in (commands["study"].help or "")
