"""Symlinks in the studio's workspace: one that loops (to itself, round a cycle, or into a loop) is a one-line
400 on load and save that changes nothing, never a 500; the listing answers and leaves it out; a workspace
that is itself a looping symlink is refused in one line before the model loads."""

from __future__ import annotations

import os

import pytest

from tests.cli_helpers import refused_before_load
from tests.studio.test_workspace import _answer

LOOPS = {"loop": "loop", "ping": "pong", "pong": "ping", "via": "loop"}  # name -> where its link points


@pytest.fixture(scope="module")
def env(studio_env):
    e = studio_env("symlinks", seed=1)
    for name, target in LOOPS.items():
        os.symlink(target, e["ws"] / name)
    return e


@pytest.mark.parametrize("name", sorted(LOOPS))
@pytest.mark.parametrize("verb", ["load", "save"])
def test_a_looping_symlink_is_a_one_line_400_and_nothing_changes(env, verb, name):
    client, ws = env["client"], env["ws"]
    before = client.get("/api/info").json()
    entries = sorted(os.listdir(ws))
    r = _answer(client, "post", f"/api/{verb}", json={"name": name, **({"overwrite": True} if verb == "save" else {})})
    assert r.status_code == 400, r.text
    msg = r.json()["error"]
    assert "\n" not in msg and "Traceback" not in msg and f"'{name}'" in msg and "symlink that loops" in msg
    after = client.get("/api/info").json()
    assert (after["artifact"], after["version"]) == (before["artifact"], before["version"])
    assert sorted(os.listdir(ws)) == entries and all(os.path.islink(ws / n) for n in LOOPS)


def test_the_listing_answers_beside_loops_and_the_studio_goes_on(env):
    client = env["client"]
    info = _answer(client, "get", "/api/info")
    assert info.status_code == 200
    listed = info.json()
    assert "kept" in listed["artifacts"] and not set(LOOPS) & set(listed["artifacts"])
    assert not set(LOOPS) & {b["name"] for b in listed["broken"]}
    assert client.post("/api/save", json={"name": "after-loops"}).status_code == 200
    assert client.post("/api/load", json={"name": "after-loops"}).status_code == 200


def test_a_workspace_that_is_a_looping_symlink_is_refused_before_the_model_loads(tmp_path, monkeypatch, capsys):
    os.symlink("ws", tmp_path / "ws")
    line = refused_before_load(monkeypatch, capsys, "studio", "-m", "tiny-llama", "--workspace", str(tmp_path / "ws"))
    assert line.startswith("error: ") and "symlink that loops" in line
    assert os.listdir(tmp_path) == ["ws"] and os.path.islink(tmp_path / "ws")
