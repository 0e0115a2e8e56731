"""Every leaf command of ``geosteer``, one bad value per kind of option it takes (int, float, layer list, path,
choice): one ``error:`` line, exit 2, no model built, no file left. The walk finds new verbs by itself."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest

from geosteer.cli import app, register_clis
from geosteer.cli.common import build_command, run_command
from tests.cli_helpers import command_leaves, forbid_model_builds

LAYER_OPTIONS = {"--layers", "--score-layers"}
# text options whose valid values are a fixed set (each verb checks them before loading)
CHOICE_OPTIONS = {"--corpus", "--split", "--variants", "--mode", "--method", "--ov-norm", "--value-space", "--site",
                  "--sites", "--schedule", "--pool", "--score", "--kinds", "--direction", "--save-dtype",
                  "--mixed-precision", "--fields", "--references", "--dtype"}
BAD = {"int": "12abc", "float": "nan", "layers": "2-1", "choice": "no-such-choice"}


@pytest.fixture
def no_weights(monkeypatch):
    forbid_model_builds(monkeypatch)


register_clis()
ROOT = build_command(app)  # built once: every case runs the same tree, as the ``geosteer`` command does
LEAVES = command_leaves(ROOT)


def _kind(param) -> str | None:
    annotation = param.type_descriptor.annotation
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    base = args[0] if args and all(a is args[0] for a in args) else annotation
    flag = param.opts[0] if param.opts else ""
    if base is bool:
        return None
    if base is int:
        return "int"
    if base is float:
        return "float"
    if isinstance(base, type) and issubclass(base, Path):
        return "path"
    if flag in LAYER_OPTIONS:
        return "layers"
    if flag in CHOICE_OPTIONS:
        return "choice"
    return None


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, tiny_model) -> dict[str, str]:
    """Valid values for the parameters a verb requires, so that the bad value is what gets refused."""
    from geosteer import manifold

    root = tmp_path_factory.mktemp("inputs")
    model, _ = tiny_model("llama")
    bank = manifold.install(model)
    manifold.uninstall(model)
    surfaces = manifold.save(bank, root / "surfaces")
    (root / "targets.json").write_text(json.dumps([{"prompt": "The cat", "target": " sat"}]))
    (root / "controls.json").write_text(json.dumps(["The dog"]))
    (root / "pairs.json").write_text(json.dumps([["I love it", "I hate it"]]))
    return {"--surfaces": str(surfaces), "folder": str(surfaces), "--target-file": str(root / "targets.json"),
            "--control-file": str(root / "controls.json"), "--pairs": str(root / "pairs.json"),
            "--site": "value_full", "ops": "zero layer=0", "--prompt": "Hi", "kind": "heads",
            "result": str(root / "targets.json"), "results": str(root / "targets.json"), "repo_id": "org/name",
            "--base-model": "tiny-llama", "--layers": "0", "--layer": "1",
            "directional plot --out": str(root / "never-written.html"),
            "study directional plot --out": str(root / "never-written.html")}


def _arguments(verb: str, name: str, bad: str, tmp: Path, inputs: dict[str, str]) -> list[str]:
    """The command line after the verb: ``bad`` for the parameter ``name``, a well-formed value for every
    other required one (an output: a fresh path in ``tmp``)."""
    args = []
    for param in LEAVES[verb].params:
        this = _name(param)
        if this != name and not param.required:
            continue
        value = bad if this == name else inputs.get(f"{verb} {this}", inputs.get(this, str(tmp / f"out-{param.name}")))
        args += [value] if param.param_type_name == "argument" else [this, value]
    return args


def _name(param) -> str:
    return param.opts[0] if param.opts and param.param_type_name == "option" else param.name


def _cases() -> list[tuple[str, str, str]]:
    """(verb, option or argument name, kind): the first parameter of each kind of each verb."""
    cases = []
    for verb, cmd in LEAVES.items():
        seen = set()
        for param in cmd.params:
            kind = _kind(param)
            if kind is not None and kind not in seen:
                seen.add(kind)
                cases.append((verb, _name(param), kind))
    return cases


CASES = _cases()


# verbs whose parameters are all free text or flags (names, folder-or-Hub ids, lm-eval's own options)
TEXT_ONLY = {"recipe show", "eval"}


def test_the_walk_covers_every_verb_and_kind():
    assert len(LEAVES) >= 40
    assert {k for _, _, k in CASES} == {"int", "float", "layers", "path", "choice"}
    assert set(LEAVES) - {v for v, _, _ in CASES} == TEXT_ONLY  # a new verb is walked or listed here


@pytest.mark.parametrize("verb,flag,kind", CASES, ids=[f"{v}:{f}" for v, f, _ in CASES])
def test_one_bad_value_is_refused_before_any_model_is_built(verb, flag, kind, tmp_path, monkeypatch, capsys,
                                                            inputs, no_weights):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("a plain file\n")
    before = sorted(p.name for p in tmp_path.iterdir())
    # options that are not required one by one, but one of a set is: learn vectors reads --pairs (or --positive
    # with --negative)
    one_of = {"learn vectors": ("--pairs", inputs["--pairs"])}
    args_extra = list(one_of[verb]) if verb in one_of and flag != one_of[verb][0] else []
    cmd = LEAVES[verb]
    bad = str(tmp_path / "afile" / "x") if kind == "path" else BAD[kind]  # a path under a plain file
    args = [*verb.split(), *_arguments(verb, flag, bad, tmp_path, inputs)]
    if "--model" in {o for p in cmd.params for o in p.opts} and flag != "--model" and "--model" not in args:
        args += ["--model", "tiny-llama"]
    args += args_extra
    with pytest.raises(SystemExit) as e:
        run_command(ROOT, args)
    lines = capsys.readouterr().err.strip().splitlines()
    err = lines[-1] if lines else ""
    assert e.value.code == 2, lines
    assert err.startswith("error: ") and all(ln.startswith(("note: ", "warning: ")) for ln in lines[:-1]), lines
    assert flag in err or bad in err, err  # the refusal names what was wrong
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written



# well-typed values that no model takes: an empty prompt, a next-token rank outside the vocabulary
# (tiny-llama's config, read without weights, names 65536 token ids)
EDITS = ["edit-specificity", "edit-linearity", "edit-locality", "edit-protocol"]
OUT_OF_RANGE = [
    (["generate", "-p", ""], "--prompt is empty"),
    (["compare", "-p", "Hi", "-p", ""], "--prompt is empty (prompt 2 of 2)"),
    (["measure", "explore", "--prompt", ""], "--prompt is empty"),
    (["measure", "explore", "--record-qk", "qk.json", "--qk-prompt", ""], "--qk-prompt is empty"),
    *[(["study", "dynamics", verb, "--target-rank", rank], f"--target-rank {rank} is not a next-token rank")
      for verb in EDITS for rank in ("-1", "65536")],
    (["study", "dynamics", "edit-protocol", "--ablate-rank", "70000"], "--ablate-rank 70000 is not a next-token"),
]


@pytest.mark.parametrize("args,needle", OUT_OF_RANGE, ids=[" ".join(a) for a, _ in OUT_OF_RANGE])
def test_empty_prompt_and_out_of_vocabulary_rank_are_refused_before_the_model_loads(args, needle, tmp_path,
                                                                                    monkeypatch, capsys, inputs):
    from tests.cli_helpers import refused_before_load

    monkeypatch.chdir(tmp_path)
    extra = ["--surfaces", inputs["--surfaces"]] if args[:2] == ["measure", "explore"] else ["--model", "tiny-llama"]
    err = refused_before_load(monkeypatch, capsys, *args, *extra)
    assert needle in err, err
    if "rank" in needle:
        assert err.endswith("valid: 0 to 65535 (0 = the top token)"), err
    assert not list(tmp_path.iterdir())  # nothing written
