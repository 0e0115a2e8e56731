"""geosteer_paper.scripts: the command line a study script records and its entry point."""

import argparse
import shlex
import sys

import pytest

from geosteer.errors import GeosteerError
from geosteer_paper.scripts import command_line, run_script


def test_command_line_quotes_the_given_arguments():
    got = command_line("manifold/steering.py", ["--out", "a b.json", "--seed", "0"])
    assert got == "python paper/studies/manifold/steering.py --out 'a b.json' --seed 0"
    assert shlex.split(got)[2:] == ["--out", "a b.json", "--seed", "0"]


def test_command_line_reads_the_process_arguments_without_argv(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["paper/studies/x.py", "--name", "it's"])
    assert command_line("x.py") == "python paper/studies/x.py --name 'it'\"'\"'s'"
    assert command_line("x.py", []) == "python paper/studies/x.py "  # given, even empty, wins


def _parser():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, required=True)
    return p


def test_run_script_passes_the_parsed_arguments_and_argv():
    seen = []
    run_script(_parser(), lambda a, argv: seen.append((a.n, argv)), ["--n", "3"])
    assert seen == [(3, ["--n", "3"])]


@pytest.mark.parametrize("error", [GeosteerError("bad thing; valid: x"), ValueError("bad thing; valid: x")])
def test_run_script_reports_a_user_error_in_one_line_exit_2(error, capsys):
    def run(a, argv):
        raise error

    with pytest.raises(SystemExit) as e:
        run_script(_parser(), run, ["--n", "1"])
    assert e.value.code == 2
    assert capsys.readouterr().err == "error: bad thing; valid: x\n"


def test_run_script_leaves_other_errors_and_bad_options_alone():
    def run(a, argv):
        raise RuntimeError("a bug")

    with pytest.raises(RuntimeError, match="a bug"):
        run_script(_parser(), run, ["--n", "1"])
    with pytest.raises(SystemExit) as e:  # argparse's own usage error, before run
        run_script(_parser(), run, ["--n", "x"])
    assert e.value.code == 2
