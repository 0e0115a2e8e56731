"""Training checkpoints cannot run code: planted pickles and foreign files are refused with one line, never
executed; a checkpoint whose numbers or run differ from what was written is refused with one line."""

from __future__ import annotations

import os
import pickle
import sys

import pytest
import torch

from geosteer import cli
from geosteer.errors import GeosteerError
from geosteer.train.checkpoint import CHECKPOINT_NAME, LEGACY_NAME, load_checkpoint
from tests.train.helpers import train_bias, train_config


class Payload:
    """Unpickling this would create ``marker`` (a stand-in for arbitrary code)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _plant(path, marker, how: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if how == "torch":
        torch.save({"format": "geosteer-train-checkpoint/1", "x": Payload(str(marker))}, path)
    else:
        path.write_bytes(pickle.dumps(Payload(str(marker))))


def _snapshot(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _cfg(**kw):
    """The checkpoint tests' run: 6 steps (checkpoints at 3 and 6)."""
    return train_config(**{"steps": 6, **kw})


@pytest.mark.parametrize("name", [LEGACY_NAME, CHECKPOINT_NAME])
@pytest.mark.parametrize("how", ["torch", "pickle"])
def test_planted_pickle_is_refused_without_running(tiny, stream, tmp_path, name, how):
    marker = tmp_path / "PWNED"
    ckpt = tmp_path / "run" / name
    _plant(ckpt, marker, how)
    before = _snapshot(ckpt.parent)
    with pytest.raises(GeosteerError) as ei:
        train_bias(tiny, stream, _cfg(), out_dir=ckpt.parent, resume=True)
    msg = str(ei.value)
    assert len(msg.splitlines()) == 1 and str(ckpt) in msg
    assert not marker.exists()
    assert _snapshot(ckpt.parent) == before  # nothing written, nothing removed


def test_foreign_safetensors_and_garbage_are_refused(tiny, stream, tmp_path):
    from safetensors.torch import save_file

    run = tmp_path / "run"
    run.mkdir()
    save_file({"weight": torch.ones(3)}, str(run / CHECKPOINT_NAME))  # a model file, not a checkpoint
    with pytest.raises(GeosteerError, match="not a geosteer training checkpoint"):
        load_checkpoint(run / CHECKPOINT_NAME)
    (run / CHECKPOINT_NAME).write_bytes(b"\x00" * 7 + b"garbage")
    with pytest.raises(GeosteerError, match="not a readable training checkpoint"):
        train_bias(tiny, stream, _cfg(), out_dir=run, resume=True)


def test_checkpoint_file_is_safetensors_with_json_state(tiny, stream, tmp_path):
    from safetensors import safe_open

    train_bias(tiny, stream, _cfg(), out_dir=tmp_path, stop_at=3)
    assert not (tmp_path / LEGACY_NAME).exists()
    with safe_open(str(tmp_path / CHECKPOINT_NAME), framework="pt") as f:
        names = set(f.keys())
        assert f.get_tensor("rng/cpu").dtype == torch.uint8
    assert {"param/vec", "rng/cpu", "optim/0/exp_avg", "optim/0/exp_avg_sq"} <= names
    state = load_checkpoint(tmp_path / CHECKPOINT_NAME)
    assert state["step"] == 3 and [r["step"] for r in state["history"]] == [1, 2, 3]


def test_legacy_plain_checkpoint_is_refused_as_unverifiable(tiny, stream, tmp_path, ckpt3):
    """A checkpoint.pt of plain data (what older geosteer wrote) carries no checksum: it is read as data only
    and refused with one line, never resumed with numbers nobody can verify."""
    state = load_checkpoint(_at_step3(ckpt3, tmp_path / "new"))
    (tmp_path / "old").mkdir()
    torch.save(state, tmp_path / "old" / LEGACY_NAME)
    with pytest.raises(GeosteerError, match="without a checksum") as ei:
        train_bias(tiny, stream, _cfg(), out_dir=tmp_path / "old", resume=True)
    assert len(str(ei.value).splitlines()) == 1


@pytest.fixture(scope="module")
def ckpt3(tiny, stream, tmp_path_factory):
    """The bytes of a checkpoint at step 3 of ``_cfg()`` (trained once for the module)."""
    folder = tmp_path_factory.mktemp("ckpt3")
    train_bias(tiny, stream, _cfg(), out_dir=folder, stop_at=3)
    return (folder / CHECKPOINT_NAME).read_bytes()


def _at_step3(ckpt3, folder):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CHECKPOINT_NAME).write_bytes(ckpt3)
    return folder / CHECKPOINT_NAME


def _read(path):
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    return meta, tensors


def _rewrite(path, meta, tensors, *, fix_digest: bool) -> None:
    """Save a valid container with the given content; ``fix_digest`` recomputes the checksum (a careful
    forger), otherwise the original one stays."""
    from safetensors.torch import save_file

    from geosteer.train.checkpoint import state_digest

    meta = dict(meta)
    if fix_digest:
        meta["sha256"] = state_digest(meta["geosteer"], tensors)
    save_file(tensors, str(path), metadata=meta)


def test_flipped_tensor_bytes_are_refused_by_the_checksum(tiny, stream, tmp_path, ckpt3):
    path = _at_step3(ckpt3, tmp_path)
    meta, tensors = _read(path)
    for name in ("param/vec", "optim/0/exp_avg_sq"):
        raw = tensors[name].clone().view(torch.uint8)
        raw[:16] ^= 0x5A  # 16 flipped bytes: still a valid float tensor
        _rewrite(path, meta, dict(tensors, **{name: raw.view(torch.float32)}), fix_digest=False)
        with pytest.raises(GeosteerError, match="does not match its checksum") as ei:
            train_bias(tiny, stream, _cfg(), out_dir=tmp_path, resume=True)
        assert len(str(ei.value).splitlines()) == 1
    one = tensors["param/vec"].clone().view(torch.uint8)
    one[0] ^= 1  # a single bit
    _rewrite(path, meta, dict(tensors, **{"param/vec": one.view(torch.float32)}), fix_digest=False)
    with pytest.raises(GeosteerError, match="checksum"):
        load_checkpoint(path)


@pytest.mark.parametrize("edit", ["step-earlier", "step-later", "last-epoch", "lr", "initial-lr"])
@pytest.mark.parametrize("fix_digest", [False, True])
def test_edited_state_is_refused(tiny, stream, tmp_path, ckpt3, edit, fix_digest):
    """Edited step / schedule position / learning rate: the checksum catches it; with a recomputed checksum
    the step, schedule, learning rates and history no longer agree and that is named instead."""
    import json

    path = _at_step3(ckpt3, tmp_path)
    meta, tensors = _read(path)
    doc = json.loads(meta["geosteer"])
    if edit.startswith("step"):
        doc["step"] = 1 if edit == "step-earlier" else 5
    elif edit == "last-epoch":
        doc["scheduler"]["last_epoch"] = 5
    elif edit == "lr":
        doc["optimizer"]["param_groups"][0]["lr"] = 5.0
    else:
        doc["optimizer"]["param_groups"][0]["initial_lr"] = 5.0
    _rewrite(path, {**meta, "geosteer": json.dumps(doc)}, tensors, fix_digest=fix_digest)
    before = path.read_bytes()
    with pytest.raises(GeosteerError) as ei:
        train_bias(tiny, stream, _cfg(), out_dir=tmp_path, resume=True)
    msg = str(ei.value)
    assert len(msg.splitlines()) == 1 and str(path) in msg
    assert ("checksum" in msg) != fix_digest
    assert path.read_bytes() == before  # nothing overwritten


def test_checkpoint_of_another_base_model_is_refused(tiny, stream, tmp_path, ckpt3, monkeypatch):
    """Same shapes, other model id: refused naming base_model (the id is what the artifact is labelled with)."""
    model, _ = tiny
    _at_step3(ckpt3, tmp_path)
    monkeypatch.setattr(model.config, "_geosteer_name", "tiny-other", raising=False)
    with pytest.raises(GeosteerError, match="base_model: checkpoint 'llama', now 'tiny-other'"):
        train_bias(tiny, stream, _cfg(), out_dir=tmp_path, resume=True)


def test_checkpoint_of_another_run_record_is_refused(tiny, stream, tmp_path):
    train_bias(tiny, stream, _cfg(), out_dir=tmp_path, stop_at=3, run={"grid_range": [-4.0, 4.0]})
    with pytest.raises(GeosteerError, match=r"grid_range: checkpoint \[-4.0, 4.0\], now \[-2.0, 2.0\]"):
        train_bias(tiny, stream, _cfg(), out_dir=tmp_path, resume=True, run={"grid_range": [-2.0, 2.0]})
    _, res = train_bias(tiny, stream, _cfg(), out_dir=tmp_path, resume=True, run={"grid_range": [-4.0, 4.0]})
    assert res.resumed_from == 3


def test_tampered_checkpoint_is_refused(tiny, stream, tmp_path, ckpt3):
    """Valid container, wrong content with a recomputed checksum: a NaN parameter / a mis-shaped optimizer
    tensor are named."""
    path = _at_step3(ckpt3, tmp_path)
    meta, tensors = _read(path)
    bad = dict(tensors, **{"param/vec": torch.full_like(tensors["param/vec"], float("nan"))})
    _rewrite(path, meta, bad, fix_digest=True)
    with pytest.raises(GeosteerError, match="parameter vec holds NaN"):
        train_bias(tiny, stream, _cfg(), out_dir=tmp_path, resume=True)
    bad = dict(tensors, **{"optim/0/exp_avg": torch.zeros(5)})
    _rewrite(path, meta, bad, fix_digest=True)
    with pytest.raises(GeosteerError, match="exp_avg of parameter 0 has shape"):
        train_bias(tiny, stream, _cfg(), out_dir=tmp_path, resume=True)


def test_cli_resume_with_planted_pickle_exits_2(monkeypatch, capsys, tmp_path):
    marker = tmp_path / "PWNED"
    out = tmp_path / "surf"
    _plant(tmp_path / "surf.train" / LEGACY_NAME, marker, "torch")
    text = tmp_path / "t.txt"
    text.write_text("The river flows through the valley. " * 50)
    monkeypatch.setattr(sys, "argv", ["geosteer", "learn", "surfaces", "--model", "tiny-llama", "--out",
                                      str(out), "--text", str(text), "--steps", "2", "--resume"])
    with pytest.raises(SystemExit) as ei:
        cli.main()
    err = capsys.readouterr().err
    assert ei.value.code == 2 and err.startswith("error: ") and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err and not marker.exists() and not out.exists()
