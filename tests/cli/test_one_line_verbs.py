"""``geosteer --help`` lists each verb on one line; ``generate`` continues every ``--prompt`` it is given."""

from __future__ import annotations

import json
import re

from tests.cli_helpers import run_cli


def test_top_level_help_lists_each_verb_on_one_line(monkeypatch, capsys):
    from geosteer.cli import SUMMARY_CHARS, summary
    from tests.cli_helpers import geosteer_command

    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("TERMINAL_WIDTH", "80")
    code, out, _ = run_cli(monkeypatch, capsys, "--help")
    assert code == 0
    panel = out[out.index("Commands"):]
    rows = [ln for ln in panel.splitlines()[1:] if ln.startswith("│")]
    verbs = [n for n, c in geosteer_command().commands.items() if not getattr(c, "hidden", False)]
    assert len(rows) == len(verbs), panel  # no row continues onto a second line
    for row, verb in zip(rows, verbs, strict=True):
        assert re.match(rf"│ {re.escape(verb)}\s+\S", row), row
    long = "Strided sliding-window perplexity (and bits per byte) of a text file or corpus split. More here."
    assert summary(long) == "Strided sliding-window perplexity of a text file or corpus…"
    assert len(summary(long)) <= SUMMARY_CHARS and summary("Short one.\n\nMore.") == "Short one"


def test_generate_continues_every_prompt(monkeypatch, capsys):
    code, out, err = run_cli(monkeypatch, capsys, "generate", "-m", "tiny-llama", "-p", "One", "-p", "Two",
                             "--max-new-tokens", "3", "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert isinstance(rows, list) and len(rows) == 2
    code, out1, err = run_cli(monkeypatch, capsys, "generate", "-m", "tiny-llama", "-p", "Two",
                              "--max-new-tokens", "3", "--json")
    assert code == 0, err
    assert json.loads(out1) == rows[1]  # the same continuation as that prompt alone
    code, out, err = run_cli(monkeypatch, capsys, "generate", "-m", "tiny-llama", "-p", "One", "-p", "Two",
                             "--max-new-tokens", "3")
    assert code == 0 and "One" in out and "Two" in out
