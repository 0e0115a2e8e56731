"""Every output option of every verb is checked while the command line is parsed (geosteer.cli.outputs):
a path under a file, a wrong extension or an existing folder of the user's files is refused with one line,
exit 2, before any model loads, and nothing the user had is touched."""

from __future__ import annotations

import json

import pytest
import typer

from geosteer import manifold
from geosteer.cli.outputs import OUTPUT_FLAGS
from geosteer.errors import GeosteerError
from tests.cli_helpers import command_leaves, one_line_exit_2, run_cli


@pytest.fixture
def no_model(monkeypatch):
    """Loading a model fails the test: the output path must be refused before."""
    import geosteer
    from geosteer.models import loading

    def boom(*a, **k):
        raise AssertionError("a model was loaded before the output path was checked")

    monkeypatch.setattr(geosteer, "load_model", boom)
    monkeypatch.setattr(loading, "load_model", boom)


def _root():
    from geosteer import cli

    cli.register_clis()
    return typer.main.get_command(cli.app)


def _output_options():
    found = []
    for path, cmd in command_leaves(_root()).items():
        for p in cmd.params:
            flags = [o for o in getattr(p, "opts", []) if o in OUTPUT_FLAGS]
            if getattr(p, "param_type_name", "") == "option" and flags:
                found.append((path, flags[0]))
    return found


OUTPUTS = _output_options()


@pytest.fixture(scope="module")
def root():
    return _root()


def test_the_walk_finds_the_known_output_options():
    have = set(OUTPUTS)
    for known in [("manifold edit", "--out"), ("learn surfaces", "--out"), ("learn walls", "--out"),
                  ("tasks build", "--out"), ("compare", "--out"), ("report", "--png"), ("demo", "--out-dir"),
                  ("learn gates", "--out"), ("measure diagnose", "--csv"),
                  ("study directional pretrain", "--out-dir"), ("study directional diagonal", "--figure")]:
        assert known in have, known
    assert len(OUTPUTS) >= 40


@pytest.mark.parametrize("verb,flag", OUTPUTS, ids=[f"{v}:{f}" for v, f in OUTPUTS])
def test_every_output_option_refuses_a_path_under_a_file_before_any_work(tmp_path, no_model, root, verb, flag):
    """Parsed in-process by the click command built once (the one-line/exit-2 printing of such errors is
    checked through the real entry point below)."""
    afile = tmp_path / "afile"
    afile.write_text("mine")
    for name in ("x.json", "x.csv", "x.html"):  # the first one the option accepts reaches the path check
        with pytest.raises(GeosteerError) as e:
            root.main(args=[*verb.split(), flag, str(afile / name)], prog_name="geosteer", standalone_mode=False)
        if "extension" not in str(e.value):
            break
    assert f"lies under {afile}, which is a file" in str(e.value) and "\n" not in str(e.value)
    assert afile.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


@pytest.mark.parametrize("args,needle", [
    (["compare", "-m", "tiny-llama", "-p", "Hi", "--out", "rows.xlsx"], "valid extensions: .json, .csv"),
    (["measure", "decompose", "-m", "tiny-llama", "--out", "rows.txt"], "valid extensions: .json, .csv"),
    (["measure", "diagnose", "-m", "tiny-llama", "--csv", "rows.json"], "valid extensions: .csv"),
    (["report", "r.json", "--out", "r.pdf"], "valid extensions: .html, .htm"),
    (["measure", "diagnose", "-m", "tiny-llama", "--out", "ADIR"], "is a folder; give a file name"),
])
def test_wrong_extension_or_a_folder_for_a_file_is_refused(monkeypatch, capsys, tmp_path, no_model, args, needle):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ADIR").mkdir()
    code, _, err = run_cli(monkeypatch, capsys, *args)
    one_line_exit_2(code, err)
    assert needle in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ADIR"]


@pytest.fixture
def victim(tmp_path):
    d = tmp_path / "victim"
    d.mkdir()
    (d / "thesis.txt").write_text("precious")
    return d


@pytest.fixture
def surfaces(tiny_model, tmp_path):
    model, _ = tiny_model("llama")
    bank = manifold.install(model)
    manifold.uninstall(model)
    return manifold.save(bank, tmp_path / "s")


@pytest.mark.parametrize("make_args", [
    lambda s, v, t: ["manifold", "edit", "zero layer=0", "-s", str(s), "-o", str(v)],
    lambda s, v, t: ["learn", "surfaces", "-m", "tiny-llama", "--steps", "1", "--out", str(v)],
    lambda s, v, t: ["learn", "walls", "-s", str(s), "--target-file", str(t), "--control-file", str(t),
                     "-o", str(v)],
    lambda s, v, t: ["tasks", "build", "-m", "tiny-llama", "--out", str(v), "--lengths", "256"],
    lambda s, v, t: ["learn", "gates", "-m", "tiny-llama", "--out", str(v)],
], ids=["manifold-edit", "manifold-train", "wall-learn", "tasks-build", "learn-gates"])
def test_folder_verbs_never_replace_a_folder_of_user_files(monkeypatch, capsys, tmp_path, no_model, surfaces, victim,
                                                           make_args):
    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps(["a"]))
    code, _, err = run_cli(monkeypatch, capsys, *make_args(surfaces, victim, prompts))
    one_line_exit_2(code, err)
    assert "not a geosteer output folder" in err and "thesis.txt" in err
    assert sorted(p.name for p in victim.iterdir()) == ["thesis.txt"]
    assert (victim / "thesis.txt").read_text() == "precious"


def test_manifold_edit_replaces_its_own_kind_and_refuses_another(monkeypatch, capsys, tmp_path, surfaces):
    code, _, err = run_cli(monkeypatch, capsys, "manifold", "edit", "scale=0.5 layer=0", "-s", str(surfaces),
                           "-o", str(surfaces))  # in place: the same kind
    assert code == 0, err
    assert manifold.read_config(surfaces)["history"]
    other = tmp_path / "tasks"
    other.mkdir()
    (other / "manifest.json").write_text(json.dumps({"format": "geosteer-tasks", "tasks": {}}))
    code, _, err = run_cli(monkeypatch, capsys, "manifold", "edit", "zero layer=0", "-s", str(surfaces),
                           "-o", str(other))
    one_line_exit_2(code, err)
    assert "is a geosteer-tasks artifact" in err and sorted(p.name for p in other.iterdir()) == ["manifest.json"]


def test_push_offline_is_one_line(monkeypatch, capsys, surfaces):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, _, err = run_cli(monkeypatch, capsys, "push", str(surfaces), "org/name")
    one_line_exit_2(code, err)
    assert "offline mode" in err and "HF_HUB_OFFLINE" in err
