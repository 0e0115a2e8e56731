"""``geosteer --help`` lists each verb on one line; ``generate`` continues every ``--prompt`` it is given; an
option that takes one value, given twice, is refused (not the last one kept silently)."""

from __future__ import annotations

import json
import re

import pytest

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


@pytest.mark.parametrize("args,needle", [
    (["generate", "-m", "tiny-llama", "-p", "A", "--max-new-tokens", "2", "--max-new-tokens", "3"],
     "--max-new-tokens given 2 times"),
    (["generate", "-m", "tiny-llama", "-m", "tiny-gpt2", "-p", "A"], "-m given 2 times"),
    (["generate", "--model=tiny-llama", "--model", "tiny-gpt2", "-p", "A"], "--model given 2 times"),
    (["generate", "-m", "tiny-llama", "-p", "A", "--greedy", "--sample"], "--greedy and --sample contradict"),
    (["ppl", "-m", "tiny-llama", "--corpus", "heldout", "--corpus", "train"], "--corpus given 2 times"),
])
def test_a_one_value_option_given_twice_is_refused(monkeypatch, capsys, args, needle):
    from tests.cli_helpers import refused_before_load

    assert needle in refused_before_load(monkeypatch, capsys, *args)


def test_repeatable_options_and_values_that_look_like_options(monkeypatch, capsys):
    from geosteer.cli.once import repeated_option
    from tests.cli_helpers import geosteer_command

    gen = geosteer_command().commands["generate"]
    assert repeated_option(gen, ["-p", "A", "-p", "B", "--set", "a=1", "--set", "b=2"]) is None
    assert repeated_option(gen, ["-p", "-m", "-m", "tiny-llama"]) is None  # "-m" the prompt, then the option
    assert repeated_option(gen, ["--json", "--json", "-p", "x"]) is None  # the same switch twice
    assert repeated_option(gen, ["-p", "x", "--", "--seed", "1"]) is None
