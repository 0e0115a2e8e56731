"""No NaN or degenerate surfaces anywhere, no artifact for another model, repair after a killed save, and a fuzz
test of the edit mini-language (issue 11, items 3, 4, 5 and the fuzz bar)."""

from __future__ import annotations

import json
import logging
import math
import os
import random
import subprocess
import sys

import pytest
import torch

import geosteer
from geosteer import manifold
from geosteer.artifacts import recover_folder, write_folder_atomic
from geosteer.artifacts import sha256_file as _sha256
from geosteer.errors import ArtifactError, GeosteerError
from geosteer.manifold import edit as E
from geosteer.manifold.artifact import TENSORS_NAME
from tests.cli_helpers import one_line_exit_2 as _one_line_exit_2
from tests.cli_helpers import run_cli
from tests.conftest import random_bank


def _files(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _rewrite_tensors(folder, **changes):
    """Replace tensors of a saved artifact and fix its checksum (a tampered but self-consistent artifact)."""
    from safetensors.torch import load_file, save_file

    t = load_file(str(folder / TENSORS_NAME))
    t.update(changes)
    save_file(t, str(folder / TENSORS_NAME))
    doc = json.loads((folder / "geosteer_config.json").read_text())
    doc["sha256"] = _sha256(folder / TENSORS_NAME)
    (folder / "geosteer_config.json").write_text(json.dumps(doc))


@pytest.fixture
def saved(tiny_model, tmp_path):
    model, _ = tiny_model("llama")
    return manifold.save(random_bank(model), tmp_path / "s")


# ----------------------------------------------------------------------------- non-finite / degenerate
@pytest.mark.parametrize("op", ["scale=nan layer=1", "scale=inf layer=1", "set=nan layer=1", "set=-inf layer=0",
                                "scale=1 layer=1 value=nan", "scale=1e400 layer=1"])
def test_cli_edit_refuses_non_finite_values(monkeypatch, capsys, saved, op):
    before = _files(saved)
    code, _, err = run_cli(monkeypatch, capsys, "manifold", "edit", op, "--surfaces", str(saved), "--out",
                           str(saved))
    _one_line_exit_2(code, err)
    assert "finite" in err
    assert _files(saved) == before


def test_scale_overflow_is_refused_and_changes_nothing(tiny_model):
    model, _ = tiny_model("llama")
    bank = random_bank(model)
    c0, h0 = bank.coefficients.detach().clone(), list(bank.history)
    with pytest.raises(ValueError, match="overflow"):
        E.apply_edits(bank, ["invert layer=0", "scale=1e38 layer=1", "scale=1e38 layer=1"])
    assert torch.equal(bank.coefficients, c0) and bank.history == h0


def test_save_refuses_nan_naming_layer_head_dim(tiny_model, tmp_path):
    model, _ = tiny_model("llama")
    bank = random_bank(model)
    with torch.no_grad():
        bank.coefficients[2, 1, 5, 3, 3] = float("nan")
    with pytest.raises(GeosteerError, match="layer 2 head 1 dim 5 .*non-finite"):
        manifold.save(bank, tmp_path / "x")
    assert not (tmp_path / "x").exists() and not list(tmp_path.iterdir())
    with torch.no_grad():
        bank.coefficients[2, 1, 5, 3, 3] = 7e4  # finite in float32, infinite in float16
    with pytest.raises(GeosteerError, match="float16.*layer 2 head 1 dim 5"):
        manifold.save(bank, tmp_path / "x", dtype="float16")
    with torch.no_grad():
        bank.lo[1] = bank.hi[1]
    with pytest.raises(GeosteerError, match="layer 1 has grid range"):
        manifold.save(bank, tmp_path / "x")


@pytest.mark.parametrize("what,match", [("nan_coef", "layer 1 head 0 dim 2"), ("inf_coef", "layer 0 head 3 dim 1"),
                                        ("nan_range", "layer 2 has grid range"), ("lo_gt_hi", "layer 0 has"),
                                        ("lo_eq_hi", "layer 1 has grid range")])
def test_load_refuses_non_finite_and_degenerate(monkeypatch, capsys, tiny_model, saved, what, match):
    from safetensors.torch import load_file

    t = load_file(str(saved / TENSORS_NAME))
    c, lo, hi = t["coefficients"].clone(), t["lo"].clone(), t["hi"].clone()
    if what == "nan_coef":
        c[1, 0, 2, 0, 4] = float("nan")
    elif what == "inf_coef":
        c[0, 3, 1, 2, 2] = float("inf")
    elif what == "nan_range":
        lo[2] = float("nan")
    elif what == "lo_gt_hi":
        lo[0], hi[0] = 2.0, -2.0
    else:
        lo[1] = hi[1] = 1.5
    _rewrite_tensors(saved, coefficients=c, lo=lo, hi=hi)
    model, _ = tiny_model("llama")
    with pytest.raises(GeosteerError, match=match):
        manifold.load(saved, model=model)
    before = _files(saved)
    for args in (["show", str(saved)],
                 ["manifold", "edit", "zero layer=0", "--surfaces", str(saved), "--out", str(saved)],
                 ["ppl", "--model", "tiny-llama", "--corpus", "heldout", "--max-tokens", "64", "--context", "32",
                  "--stride", "16", "--surfaces", str(saved)]):
        code, out, err = run_cli(monkeypatch, capsys, *args)
        _one_line_exit_2(code, err)
        assert "ZeroDivision" not in err and "NaN" not in out
    assert _files(saved) == before


def test_non_finite_perplexity_is_an_error(tiny_model):
    from geosteer.eval.perplexity import strided_perplexity
    from geosteer.interventions import HookIntervention, steer

    model, tok = tiny_model("llama")
    text = "The cat sat on the mat by the door. " * 20
    ok = strided_perplexity(model, tok, text, context=32, stride=16)
    assert math.isfinite(ok.ppl)
    poison = HookIntervention("attn_out", lambda x, ctx: x * float("nan"), layers=[1])
    with steer(model, poison), pytest.raises(GeosteerError, match="perplexity is not finite"):
        strided_perplexity(model, tok, text, context=32, stride=16)


# ----------------------------------------------------------------------------- another base model
def test_artifact_for_another_model_is_refused_unless_forced(monkeypatch, capsys, tiny_model, saved):
    qwen3, _ = tiny_model("qwen3")
    llama, _ = tiny_model("llama")
    manifold.load(saved, model=llama)  # its own model: fine
    with pytest.raises(GeosteerError, match="made for base model 'tiny-llama', not for 'tiny-qwen3'"):
        manifold.load(saved, model=qwen3)
    bank = manifold.load(saved, model=qwen3, force=True)  # same shapes: the user's explicit choice
    assert bank.n_heads == qwen3.config.num_attention_heads
    base = ["ppl", "--model", "tiny-qwen3", "--corpus", "heldout", "--max-tokens", "64", "--context", "32",
            "--stride", "16", "--json", "--surfaces", str(saved)]
    code, _, err = run_cli(monkeypatch, capsys, *base)
    _one_line_exit_2(code, err)
    assert "tiny-llama" in err and "tiny-qwen3" in err and "--force" in err
    code, out, err = run_cli(monkeypatch, capsys, *base, "--force")
    assert code == 0, err
    assert math.isfinite(json.loads(out)["ppl"])


def test_studio_start_artifact_for_another_model_needs_force(tiny_model, saved):
    """`geosteer studio --surfaces DIR` goes through bankio.open_bank: refused for another base model unless
    --force (the studio CLI passes it)."""
    from geosteer.studio import bankio

    qwen3, _ = tiny_model("qwen3")
    with pytest.raises(GeosteerError, match="not for 'tiny-qwen3'"):
        bankio.open_bank(qwen3, saved)
    assert manifold.attached_bank(qwen3) is None  # nothing attached by the refusal
    bank = bankio.open_bank(qwen3, saved, force=True)
    try:
        assert manifold.attached_bank(qwen3) is bank
    finally:
        manifold.uninstall(qwen3)


# ----------------------------------------------------------------------------- killed between the renames
def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_load_after_a_killed_save_refuses_and_writes_nothing(tiny_model, saved):
    model, _ = tiny_model("llama")
    good = _files(saved)
    pid = _dead_pid()
    old = saved.parent / f".{saved.name}.old-{pid}"
    os.replace(saved, old)  # the state a kill between the two renames leaves
    tmp = saved.parent / f".{saved.name}.tmp-{pid}-abc123"
    tmp.mkdir()
    (tmp / "half.bin").write_bytes(b"x")
    before = sorted(p.name for p in saved.parent.iterdir())
    for load in (lambda: manifold.load(saved, model=model), lambda: geosteer.load(saved, model=model)):
        with pytest.raises(ArtifactError, match=f"is missing: a save of it was killed.*{old.name}.*rename") as e:
            load()
        assert "\n" not in str(e.value)
    assert sorted(p.name for p in saved.parent.iterdir()) == before  # loading never renames or deletes
    assert recover_folder(saved)[0].startswith(f"restored {saved}")  # the explicit repair
    assert _files(saved) == good and not old.exists() and not tmp.exists()
    assert manifold.load(saved, model=model).n_parameters() > 0


def test_next_save_repairs_and_keeps_live_processes_folders(tiny_model, tmp_path, caplog):
    model, _ = tiny_model("llama")
    bank = random_bank(model)
    dest = tmp_path / "a"
    manifold.save(bank, dest)
    pid = _dead_pid()
    os.replace(dest, tmp_path / f".a.old-{pid}")
    live = tmp_path / f".a.tmp-{os.getppid()}-zzz"  # a running process: maybe saving right now
    live.mkdir()
    with caplog.at_level(logging.WARNING, logger="geosteer.artifacts"):
        write_folder_atomic(dest, lambda t: [(t / "geosteer_config.json").write_text('{"format": "geosteer-surfaces"}'),
                                             (t / "f.txt").write_text("new")])  # same kind: may replace it
    assert (dest / "f.txt").read_text() == "new"
    assert not (tmp_path / f".a.old-{pid}").exists() and live.exists()
    assert any("restored" in r.getMessage() for r in caplog.records)
    # the kill came after both renames: the stale copy is just removed, the artifact untouched
    (tmp_path / f".a.old-{pid}").mkdir()
    assert recover_folder(dest) == [f"removed {tmp_path / f'.a.old-{pid}'}, left behind by a killed save of "
                                    f"{dest}"]
    assert (dest / "f.txt").read_text() == "new" and recover_folder(dest) == []


# ----------------------------------------------------------------------------- fuzz
_VERBS = ["scale", "invert", "zero", "set", "wall", "SCALE", "flip", "", "scale=", "set=x"]
_KEYS = ["layer", "layers", "head", "dim", "row", "rows", "col", "cols", "top", "value", "alpha", "bogus", ""]
_VALS = ["0", "1", "2", "3", "7", "15", "-1", "1-2", "2-1", "0,2", "0-3,5", "abc", "nan", "inf", "-inf", "1e400",
         "1e38", "0.5", "", "=", "1..3", "0-99999999999", "٣", "1,,2", " ", "10**3", "0x10", "+1"]


def _random_edit(rng: random.Random) -> str:
    verb = rng.choice(_VERBS)
    if rng.random() < 0.5 and "=" not in verb and verb:
        verb += "=" + rng.choice(_VALS)
    toks = [verb] + [f"{rng.choice(_KEYS)}{rng.choice(['=', '=', ':', ''])}{rng.choice(_VALS)}"
                     for _ in range(rng.randint(0, 4))]
    return rng.choice([" ", ":", "  "]).join(toks)


def _random_dict(rng: random.Random) -> dict:
    pool = [0, 1, 3, -1, 2.5, "1", None, True, [0], [1, 2], [-1], ["a"], {"x": 1}, float("nan"), 10 ** 30]
    d = {"op": rng.choice(["scale", "set", "wall", "zero", "invert", 5, None])}
    for k in rng.sample(["layers", "heads", "dims", "rows", "cols", "value", "top"], rng.randint(0, 4)):
        d[k] = rng.choice(pool)
    return d


def test_fuzz_edit_language(tiny_model):
    """Random edit strings and dicts: a valid edit, or a one-line ValueError/GeosteerError with the bank
    unchanged — never another exception, never a non-finite coefficient."""
    model, _ = tiny_model("llama")
    bank = random_bank(model)
    rng = random.Random(1234)
    n_ok = n_refused = 0
    for i in range(400):
        edit = _random_edit(rng) if i % 4 else None
        c0, h0 = bank.coefficients.detach().clone(), list(bank.history)
        try:
            if i % 4:
                E.apply_edits(bank, [edit])
            else:
                d = _random_dict(rng)
                edit = repr(d)
                E.apply_edits(bank, [E.Edit.from_dict(d)])
        except (ValueError, GeosteerError) as e:
            n_refused += 1
            msg = str(e)
            assert msg and "\n" not in msg, (edit, msg)
            assert "invalid literal" not in msg and "could not convert" not in msg, (edit, msg)
            assert torch.equal(bank.coefficients, c0) and bank.history == h0, edit
        else:
            n_ok += 1
            assert torch.isfinite(bank.coefficients).all(), edit
            assert len(bank.history) == len(h0) + 1
    assert n_ok > 20 and n_refused > 100  # both paths were exercised
