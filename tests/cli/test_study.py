"""The command tree: paper studies under `geosteer study <method> <name>`, tool verbs outside it, no old
spellings left, and every leaf (hidden ones too) answering `--help`."""

from __future__ import annotations

import json

from typer.main import get_command
from typer.testing import CliRunner

from geosteer.cli import app
from geosteer.cli.renamed import RENAMED as REMOVED_VERBS  # former spellings: refused, naming the current one
from tests.cli_helpers import command_leaves, run_cli

MAX_TOOL_VERBS = 30  # the learners and measurements under two nouns: learn scales left `geosteer study`;
# learn loreft came with LoReFT as a method
# What a user runs on their own model; a new verb outside `geosteer study` is added here on purpose.
TOOL_VERBS = {
    "push", "info", "ppl", "generate", "compare", "report", "studio", "demo", "eval", "serve",
    "tasks build", "recipe show", "recipe save", "show", "manifold edit", "manifold import",
    "learn surfaces", "learn walls", "learn steering-surfaces", "learn scales", "learn gates", "learn vectors",
    "learn loreft",
    "measure decompose", "measure diagnose", "measure explore", "bench text", "bench judge",
    "bench decide",
}



def _tool_verbs() -> set[str]:
    return {p for p, c in command_leaves().items() if not c.hidden and not p.startswith("study ")}


def test_tool_verbs_outside_study_are_the_known_tools():
    assert _tool_verbs() == TOOL_VERBS


def test_tool_verbs_outside_study_stay_under_the_cap():
    assert len(_tool_verbs()) <= MAX_TOOL_VERBS


def test_removed_spellings_are_gone_and_their_current_ones_exist(monkeypatch, capsys):
    leaves = command_leaves()
    for old, new in REMOVED_VERBS.items():
        assert old not in leaves, old
        verb, _, option = new.rpartition(" ")
        assert new in leaves or option in {o for p in leaves[verb].params for o in p.opts}, new
    for argv in (["recipe", "keys"], ["directional", "ppl", "--site", "attn_out"], ["dynamics", "ablate"]):
        code, _, err = run_cli(monkeypatch, capsys, *argv)
        assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, (argv, err)
    for old, new in REMOVED_VERBS.items():  # every former spelling names its current one
        code, _, err = run_cli(monkeypatch, capsys, *old.split(), "--help")
        assert code == 2 and len(err.strip().splitlines()) == 1 and f"'geosteer {new}'" in err, (old, err)


def test_recipe_show_keys_lists_every_key(monkeypatch, capsys):
    code, new, new_err = run_cli(monkeypatch, capsys, "recipe", "show", "--keys", "--json")
    assert code == 0 and "note:" not in new_err
    from geosteer.methods import recipe_keys

    assert [r["key"] for r in json.loads(new)] == list(recipe_keys())
    code, valued, _ = run_cli(monkeypatch, capsys, "recipe", "show", "--keys", "--set", "scale_par=0", "--json")
    values = {r["key"]: r["value"] for r in json.loads(valued)}
    assert code == 0 and values["scale_par"] == 0 and values["surfaces"] is None


def test_every_leaf_answers_help_without_loading_a_model(monkeypatch):
    from tests.cli_helpers import forbid_model_builds

    forbid_model_builds(monkeypatch)
    runner = CliRunner()
    leaves = list(command_leaves())
    tree = get_command(app)
    monkeypatch.setattr("typer.testing._get_command", lambda _app: tree)  # built once, not once per leaf
    assert len(leaves) > 50
    for path in leaves:
        res = runner.invoke(app, [*path.split(), "--help"], prog_name="geosteer")
        assert res.exit_code == 0, (path, res.output)
        assert f"geosteer {path}" in " ".join(res.output.split()) and len(res.output.strip()) > 80, path
