"""Inputs the docs promise to refuse before any model loads: prompts longer than the model's positions (a
rotary model too), a task build that builds nothing, an lm-eval ``pretrained`` that names no model."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.cli_helpers import one_line_exit_2, refused_before_load, run_cli

LONG = " ".join(["word"] * 700)


@pytest.mark.parametrize("model", ["tiny-llama", "tiny-gpt2"])
def test_pairs_longer_than_the_positions(monkeypatch, capsys, tmp_path, model):
    pairs = tmp_path / "pairs.json"
    pairs.write_text(json.dumps([[LONG + " good", "short bad"], ["a good", "a bad"]]))
    line = refused_before_load(monkeypatch, capsys, "learn", "vectors", "-m", model, "--pairs", str(pairs),
                               "--out", str(tmp_path / "v"))
    assert "prompt 1 is 701 tokens, longer than the model's 512 positions" in line
    assert not (tmp_path / "v").exists()


def test_qk_prompt_and_prompts_longer_than_the_positions(monkeypatch, capsys, tmp_path):
    import geosteer
    from geosteer.manifold import install, save

    m, _ = geosteer.load_model("tiny-llama")
    surf = tmp_path / "s"
    save(install(m, grid_size=4), surf)
    base = ["measure", "explore", "-m", "tiny-llama", "--surfaces", str(surf), "--coverage-windows", "0"]
    line = refused_before_load(monkeypatch, capsys, *base, "--record-qk", str(tmp_path / "qk.json"),
                               "--qk-prompt", LONG, "--no-sensitivity")
    assert line.startswith("error: --qk-prompt is 700 tokens, longer than the model's 512 positions")
    line = refused_before_load(monkeypatch, capsys, *base, "--prompt", "short", "--prompt", LONG)
    assert "--prompt 2 is 700 tokens" in line


@pytest.mark.parametrize("args,needle", [
    (["--ruler-tasks", "none", "--proxy-tasks", "none"], "build nothing"),
    (["--ruler-tasks", ",,"], "--ruler-tasks ',,' names no task"),
    (["--proxy-tasks", "a,a"], "--proxy-tasks names 'a' twice"),
])
def test_a_task_build_that_builds_nothing(monkeypatch, capsys, tmp_path, args, needle):
    line = refused_before_load(monkeypatch, capsys, "tasks", "build", "--out", str(tmp_path / "t"), *args)
    assert needle in line and not (tmp_path / "t").exists()


@pytest.mark.skipif(importlib.util.find_spec("lm_eval") is None, reason="needs the eval extra")
@pytest.mark.parametrize("name,needle", [("no/such/model", "not a Hub id"), ("nosuch", "unknown model"),
                                         ("tiny-foo", "unknown tiny model"), ("./none", "no such model folder"),
                                         ("none.gguf", "no such model folder")])
def test_eval_refuses_a_pretrained_that_names_no_model(monkeypatch, capsys, name, needle):
    code, _, err = run_cli(monkeypatch, capsys, "eval", "--model", "geosteer", "--model_args",
                           f"pretrained={name}", "--tasks", "x")
    one_line_exit_2(code, err)
    assert f"pretrained={name}" in err and needle in err


def test_overwrite_onto_a_folder_that_cannot_change(monkeypatch, capsys, tmp_path):
    import shutil
    import subprocess

    pairs = tmp_path / "pairs.json"
    pairs.write_text(json.dumps([["I love it", "I hate it"], ["a good day", "a bad day"]]))
    out = tmp_path / "v"
    code, _, err = run_cli(monkeypatch, capsys, "learn", "vectors", "-m", "tiny-llama", "--pairs", str(pairs),
                           "--out", str(out))
    assert code == 0, err
    before = sorted(p.name for p in out.iterdir())
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(out)]).returncode != 0:
        pytest.skip("no immutable flag here (chattr needs root and a file system that has it)")
    try:
        line = refused_before_load(monkeypatch, capsys, "learn", "vectors", "-m", "tiny-llama", "--pairs",
                                   str(pairs), "--out", str(out), "--overwrite")
    finally:
        subprocess.run(["chattr", "-i", str(out)])
    assert "cannot be replaced (Operation not permitted" in line
    assert sorted(p.name for p in out.iterdir()) == before


def test_a_folder_that_cannot_be_replaced_at_the_rename_is_one_line(monkeypatch, tmp_path):
    import errno
    import os

    from geosteer.errors import GeosteerError
    from geosteer.outputs import write_folder_atomic

    def fill(tmp):
        (tmp / "manifest.json").write_text(json.dumps({"format": "geosteer-tasks", "tasks": {}}))

    real = os.replace

    def replace(a, b):
        if ".tmp-" in str(a):
            raise PermissionError(errno.EPERM, "Operation not permitted")
        return real(a, b)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(GeosteerError, match="cannot be written or replaced") as e:
        write_folder_atomic(tmp_path / "t", fill, kind="geosteer-tasks")
    assert "\n" not in str(e.value) and not (tmp_path / "t").exists()
    assert not any(p.name.startswith(".t.") for p in tmp_path.iterdir())
