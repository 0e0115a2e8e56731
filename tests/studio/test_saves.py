"""Studio saves never delete what the studio did not write (``POST /api/save`` over a user folder, the results
folder, another artifact kind: 409, files untouched) and names are matched whole (``"kept\\n"`` is refused)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

import geosteer.manifold as M


@pytest.fixture(scope="module")
def env(tiny_model, studio_env):
    return studio_env("saves", model=tiny_model("llama"), keep=False, max_new_tokens_cap=4)


def _tree(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _refused(r, status: int, needle: str) -> None:
    assert r.status_code == status, r.text
    d = r.json()
    assert set(d) == {"error"} and "\n" not in d["error"] and needle in d["error"], d


@pytest.mark.parametrize("overwrite", [True, False])
def test_save_over_a_folder_of_user_files_is_409_and_keeps_them(env, overwrite):
    notes = env["ws"] / "notes"
    notes.mkdir(exist_ok=True)
    (notes / "todo.txt").write_text("buy milk")
    before, version = _tree(env["ws"]), env["session"].version
    r = env["client"].post("/api/save", json={"name": "notes", "overwrite": overwrite})
    _refused(r, 409, "todo.txt")
    assert _tree(env["ws"]) == before and env["session"].version == version


@pytest.mark.parametrize("exists", [True, False])
def test_the_results_folder_is_never_an_artifact_name(env, exists):
    results = env["ws"] / "results"
    shutil.rmtree(results, ignore_errors=True)
    if exists:
        results.mkdir(exist_ok=True)
        (results / "mystudy.json").write_text(json.dumps({"meta": {}, "rows": []}))
    before = _tree(env["ws"])
    for name in ("results", "Results"):
        _refused(env["client"].post("/api/save", json={"name": name, "overwrite": True}), 409, "study results")
    assert _tree(env["ws"]) == before and (results.is_dir() == exists)


def test_save_over_another_artifact_kind_is_409(env):
    gates = env["ws"] / "g"
    gates.mkdir(exist_ok=True)
    (gates / "geosteer_config.json").write_text(json.dumps({"format": "geosteer-gates", "version": 1}))
    (gates / "gates.safetensors").write_bytes(b"x")
    before = _tree(gates)
    _refused(env["client"].post("/api/save", json={"name": "g", "overwrite": True}), 409, "geosteer-gates")
    assert _tree(gates) == before


def test_save_over_its_own_artifact_needs_overwrite_and_keeps_foreign_files(env):
    c = env["client"]
    assert c.post("/api/save", json={"name": "mine"}).status_code == 200
    _refused(c.post("/api/save", json={"name": "mine"}), 409, "overwrite")
    with torch.no_grad():
        env["session"].bank.coefficients[0, 0, 0, 0, 0] = 0.25  # a different state: the save must replace it
    assert c.post("/api/save", json={"name": "mine", "overwrite": True}).status_code == 200
    assert M.load(env["ws"] / "mine").coefficients[0, 0, 0, 0, 0].item() == 0.25
    (env["ws"] / "mine" / "my-notes.md").write_text("mine")
    _refused(c.post("/api/save", json={"name": "mine", "overwrite": True}), 409, "my-notes.md")
    assert (env["ws"] / "mine" / "my-notes.md").read_text() == "mine"


@pytest.mark.parametrize("name", ["kept\n", "kept\r\n", "\nkept", "kept\x00", "ke\npt"])
@pytest.mark.parametrize("path", ["/api/save", "/api/load"])
def test_names_are_matched_whole(env, path, name):
    before = _tree(env["ws"])
    r = env["client"].post(path, json={"name": name, **({"overwrite": True} if path == "/api/save" else {})})
    _refused(r, 400, "invalid artifact name")
    assert _tree(env["ws"]) == before
