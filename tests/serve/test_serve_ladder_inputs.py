"""benchmarks/serve_ladder.py's bad input: one line naming what is wrong and what is valid, exit 2, before any
engine starts (no vLLM needed: the run is replaced by a stub that says it was reached)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


class Reached(Exception):
    """The checks passed and a model's run began."""


@pytest.fixture
def ladder(monkeypatch):
    spec = importlib.util.spec_from_file_location("serve_ladder_inputs", BENCH / "serve_ladder.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    def run_model(name, surfaces, a):
        raise Reached(name, surfaces)

    monkeypatch.setattr(mod, "run_model", run_model)
    monkeypatch.setattr(sys, "path", list(sys.path))  # main puts benchmarks/ first
    return mod


def _refused(ladder, capsys, args: list[str]) -> str:
    with pytest.raises(SystemExit) as e:
        ladder.main(args)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("args,needle", [
    (["--batch", "0"], "--batch 0: give an integer from 1 to 4096"),
    (["--new", "100000"], "--new 100000: give an integer from 1 to 32768"),
    (["--prompt-tokens", "-3"], "--prompt-tokens -3: give an integer from 1 to"),
    (["--repeats", "0"], "--repeats 0: give an integer from 1 to 1000"),
    (["--repeats", "x"], "argument --repeats: invalid int value: 'x'"),
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--before-rounds", ""], "--before-rounds is empty; give a command"),
    (["--before-rounds", "   "], "--before-rounds is empty"),
    (["--after-rounds", "touch 'x"], "cannot be split as a shell would (No closing quotation)"),
    (["--before-rounds", "no-such-program-xyz arg"], "no program 'no-such-program-xyz' on PATH"),
    (["--after-rounds", "./no/such/hold.sh"], "./no/such/hold.sh is not an executable file"),
    (["--models", ",,"], "--models ',,' names no model"),
    (["--models", "smollm2,smollm2"], "--models names 'smollm2' twice"),
    (["--models", "/no/such/model"], "no such model folder: /no/such/model"),
    (["--models", "smollm2", "--surfaces-of", "qwen2.5-0.5b=random"], "--surfaces-of qwen2.5-0.5b: not one of"),
    (["--models", "smollm2", "--one-engine", "gemma3-270m"], "--one-engine gemma3-270m: not one of --models"),
    (["--models", "smollm2", "--surfaces-of", "smollm2=no/such/surfaces"], "no such folder: no/such/surfaces"),
    (["--surfaces-of", "smollm2=random", "--surfaces-of", "smollm2=random"], "names 'smollm2' twice"),
    (["--surfaces-of", "smollm2"], "--surfaces-of needs NAME=DIR"),
])
def test_bad_flags_are_one_line_before_any_run(ladder, capsys, tmp_path, args, needle):
    err = _refused(ladder, capsys, [*args, "--out", str(tmp_path / "l.json")])
    assert needle in err
    assert not (tmp_path / "l.json").exists()


@pytest.mark.parametrize("kind,needle", [
    ("folder", "is a folder; give a file name"),
    ("text", "is not valid JSON"),
    ("list", "is not a ladder record"),
    ("models", "is not a ladder record"),
    ("suffix", "valid extensions: .json"),
])
def test_an_out_that_is_not_a_ladder_record_is_one_line(ladder, capsys, tmp_path, kind, needle):
    out = tmp_path / ("l.txt" if kind == "suffix" else "l.json")
    if kind == "folder":
        out.mkdir()
    elif kind != "suffix":
        out.write_text({"text": "not json", "list": "[1, 2]", "models": '{"models": [1]}'}[kind])
    before = out.read_text() if out.is_file() else None
    assert needle in _refused(ladder, capsys, ["--models", "smollm2", "--out", str(out)])
    assert (out.read_text() if out.is_file() else None) == before


def test_good_flags_reach_the_run(ladder, tmp_path):
    hook = tmp_path / "hold.sh"
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    out = tmp_path / "l.json"
    out.write_text('{"models": {}}')
    with pytest.raises(Reached) as e:
        ladder.main(["--models", " smollm2 ,gemma3-270m", "--batch", "4096", "--repeats", "1",
                     "--before-rounds", f"{hook} --now", "--after-rounds", "touch 'a file'", "--out", str(out)])
    assert e.value.args == ("smollm2", "artifacts/smollm2-surfaces-all")  # its shipped surfaces
    with pytest.raises(Reached) as e:
        ladder.main(["--models", "gemma3-270m", "--one-engine", "gemma3-270m", "--out", str(out)])
    assert e.value.args == ("gemma3-270m", "random")
