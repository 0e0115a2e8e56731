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
