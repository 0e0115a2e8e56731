"""The run state of a training verb: ``<out>.train`` that is not a folder is refused in one line before any
training (library and every training verb, the CLI before the model loads), and a re-signed checkpoint whose
optimizer state lacks a tensor is refused on resume in one line instead of failing in the first step."""

from __future__ import annotations

import json
import os

import pytest
import torch

from geosteer.errors import GeosteerError
from geosteer.train.checkpoint import CHECKPOINT_NAME, check_state_folder, state_digest
from tests.cli_helpers import refused_before_load
from tests.train.helpers import train_bias, train_config


def _cfg():
    return train_config(steps=6)  # checkpoints at steps 3 and 6


def _plant(state, how):
    if how == "file":
        state.write_text("a file of the user's")
    else:
        os.symlink(state.parent / "nowhere", state)


@pytest.mark.parametrize("how", ["file", "dangling link"])
def test_state_that_is_not_a_folder_is_refused(tmp_path, how):
    state = tmp_path / "out.train"
    _plant(state, how)
    with pytest.raises(GeosteerError, match="is a (file|link to nothing), not a folder") as e:
        check_state_folder(state)
    assert len(str(e.value).splitlines()) == 1
    assert check_state_folder(tmp_path / "missing.train") == tmp_path / "missing.train"
    (tmp_path / "dir.train").mkdir()
    check_state_folder(tmp_path / "dir.train")


def test_training_with_a_state_file_is_refused_before_any_step(tiny, stream, tmp_path, monkeypatch):
    state = tmp_path / "out.train"
    state.write_text("keep me")
    steps = []
    monkeypatch.setattr("geosteer.train.loop.save_checkpoint", lambda *a, **k: steps.append(1))
    with pytest.raises(GeosteerError, match="not a folder"):
        train_bias(tiny, stream, _cfg(), out_dir=state)
    assert state.read_text() == "keep me" and not steps


def _targets(tmp_path):
    t, c = tmp_path / "t.json", tmp_path / "c.json"
    t.write_text(json.dumps([{"prompt": "The cat sat on the", "target": " mat"}]))
    c.write_text(json.dumps(["A dog ran in the park"]))
    return t, c


@pytest.fixture
def surfaces(tiny_model, tmp_path):
    import geosteer.manifold as M

    model, _ = tiny_model("llama")
    bank = M.install(model, grid_size=4, grid_range=(-4.0, 4.0))
    M.uninstall(model)
    return M.save(bank, tmp_path / "src")


@pytest.mark.parametrize("verb", ["surfaces", "walls", "steering-surfaces"])
def test_training_verbs_refuse_a_state_file_before_the_model_loads(verb, surfaces, tmp_path, monkeypatch,
                                                                   capsys):
    out = tmp_path / "o"
    _plant(tmp_path / "o.train", "file")
    t, c = _targets(tmp_path)
    text = tmp_path / "text.txt"
    text.write_text("The river flows through the valley. " * 20)
    args = (["--text", str(text), "--steps", "1"] if verb == "surfaces" else
            ["--surfaces", str(surfaces), "--target-file", str(t), "--control-file", str(c), "--steps", "1"])
    line = refused_before_load(monkeypatch, capsys, "learn", verb, "-m", "tiny-llama", "--out", str(out),
                               *args)
    assert "o.train is a file, not a folder" in line
    assert (tmp_path / "o.train").read_text() == "a file of the user's" and not out.exists()


def _resign(path, drop: str) -> None:
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys() if k != drop}  # noqa: SIM118
    meta["sha256"] = state_digest(meta["geosteer"], tensors)  # a careful forger re-signs it
    save_file(tensors, str(path), metadata=meta)


@pytest.mark.parametrize("drop", ["optim/0/exp_avg", "optim/0/exp_avg_sq", "optim/0/step"])
def test_resigned_checkpoint_missing_an_optimizer_tensor_is_refused(tiny, stream, tmp_path, drop):
    train_bias(tiny, stream, _cfg(), out_dir=tmp_path, stop_at=3)
    path = tmp_path / CHECKPOINT_NAME
    _resign(path, drop)
    before = path.read_bytes()
    with pytest.raises(GeosteerError, match=f"lacks {drop.rsplit('/', 1)[1]}") as e:
        train_bias(tiny, stream, _cfg(), out_dir=tmp_path, resume=True)
    assert len(str(e.value).splitlines()) == 1 and str(path) in str(e.value)
    assert path.read_bytes() == before


def test_complete_checkpoint_still_resumes(tiny, stream, tmp_path):
    train_bias(tiny, stream, _cfg(), out_dir=tmp_path, stop_at=3)
    _, res = train_bias(tiny, stream, _cfg(), out_dir=tmp_path, resume=True)
    assert res.resumed_from == 3 and res.steps_done == 6
    assert torch.isfinite(torch.tensor(res.final_loss))
