"""Studio and malformed artifacts: a bad folder in the workspace never makes the studio answer 500 (info and
boot still answer and list it as broken with its reason; loading it is one 400 line and changes nothing), an
artifact whose forward overflows is refused at load, and an edit whose effect overflows is taken back."""

from __future__ import annotations

import json
import shutil

import pytest

from geosteer.studio.session import coeff_digest


@pytest.fixture(scope="module")
def env(studio_env):
    return studio_env("integrity", max_new_tokens_cap=4, max_queue=2)


def _state(env) -> tuple:
    s = env["session"]
    return s.version, len(s.history), coeff_digest(s.bank.coefficients), s.artifact_name


def _plant(env, name: str, edit=None, text: str | None = None, coef: float | None = None) -> None:
    folder = env["ws"] / name
    shutil.copytree(env["ws"] / "kept", folder)
    if coef is not None:
        from safetensors.torch import load_file, save_file

        from geosteer.artifacts import sha256_file as _sha256
        from geosteer.manifold.artifact import TENSORS_NAME

        t = load_file(str(folder / TENSORS_NAME))
        t["coefficients"].fill_(coef)
        save_file(t, str(folder / TENSORS_NAME))
        doc = json.loads((folder / "geosteer_config.json").read_text())
        doc["sha256"] = _sha256(folder / TENSORS_NAME)
        text = json.dumps(doc)
    if edit is not None:
        doc = json.loads((folder / "geosteer_config.json").read_text())
        edit(doc)
        text = json.dumps(doc)
    (folder / "geosteer_config.json").write_text(text)


BAD = {"bad-deep": dict(text='{"format": "geosteer-surfaces", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"),
       "bad-meta": dict(edit=lambda d: d.update(meta=[1, 2])),
       "bad-config": dict(edit=lambda d: d.update(config=[1, 2])),
       "bad-grid": dict(edit=lambda d: d["config"].update(grid_size=float("inf"))),
       "bad-version": dict(edit=lambda d: d.update(version=float("inf"))),
       "bad-layers-dup": dict(edit=lambda d: d.update(layers=[0, 0, 0])),
       "bad-history": dict(edit=lambda d: d.update(history="abc")),
       "bad-huge": dict(coef=3e38)}


def test_bad_workspace_folders_never_answer_500(env):
    c = env["client"]
    for name, how in BAD.items():
        _plant(env, name, **how)
    for path in ("/api/info", "/api/boot"):
        r = c.get(path)
        assert r.status_code == 200, r.text
    broken = {b["name"]: b["error"] for b in c.get("/api/info").json()["broken"]}
    assert set(broken) == set(BAD) - {"bad-huge"}  # its config is fine: the overflow shows at load
    assert "meta" in broken["bad-meta"] and "repeat a layer" in broken["bad-layers-dup"]
    assert all("\n" not in e for e in broken.values())
    for name in BAD:
        before = _state(env)
        r = c.post("/api/load", json={"name": name})
        assert r.status_code in (400, 404), (name, r.text)
        err = r.json()["error"]
        assert "\n" not in err and "internal" not in err, err
        assert _state(env) == before
    assert c.post("/api/load", json={"name": "kept"}).status_code == 200
    assert c.post("/api/effect", json={"max_new_tokens": 2}).status_code == 200


def test_studio_cli_refuses_bad_surfaces_in_one_line(env, monkeypatch, capsys, tmp_path):
    from tests.cli_helpers import one_line_exit_2, run_cli

    code, _, err = run_cli(monkeypatch, capsys, "studio", "-m", "tiny-llama", "--surfaces",
                           str(env["ws"] / "bad-meta"), "--workspace", str(tmp_path / "w"), "--port", "18791")
    one_line_exit_2(code, err)
    assert "meta" in err


def test_edit_whose_effect_overflows_changes_nothing(env):
    """Scaling one layer by 1000 again and again: coefficients stay finite long after the forward overflows;
    the edit whose effect has non-finite logits is answered 400 and taken back (version and history)."""
    c = env["client"]
    assert c.post("/api/load", json={"name": "kept"}).status_code == 200
    effect = {"max_new_tokens": 2}
    r = c.post("/api/edit", json={"op": "set", "scope": "layer", "layer": 0, "value": 1000, "effect": effect})
    assert r.status_code == 200, r.text
    for _ in range(12):
        before = _state(env)
        r = c.post("/api/edit", json={"op": "scale", "scope": "layer", "layer": 0, "factor": 1000,
                                      "effect": effect})
        if r.status_code == 400:
            assert "non-finite logits" in r.json()["error"], r.text
            assert _state(env) == before
            break
        assert r.status_code == 200, r.text
    else:
        pytest.fail("the forward never overflowed")
    assert c.post("/api/effect", json=effect).status_code == 200  # the state it went back to still works
    assert c.post("/api/load", json={"name": "kept"}).status_code == 200
