"""Prompt encoding of wall-learn / steer-learn: by default as the tokenizer encodes text (BOS only where the
tokenizer adds one), BOS first with ``add_bos=True`` / ``--bos``; the checkpoint records which, and a resume
with the other encoding is refused naming the field."""

import json

import pytest
import torch

from geosteer import manifold
from geosteer.errors import GeosteerError
from geosteer.manifold.wall_learn import WallLearnConfig
from geosteer.manifold.wall_learn_train import learn_walls
from geosteer.train.prompts import bos_first, encode_controls, encode_targets
from tests.cli_helpers import one_line_exit_2, run_cli
from tests.manifold.test_wall_learn import CONTROLS, TARGETS
from tests.manifold.test_walls import _bank


class _Tok:
    """A word-per-token tokenizer; ``adds_bos`` says whether its own encoding puts BOS (id 1) first."""

    bos_token_id, pad_token_id, eos_token_id = 1, 0, 2

    def __init__(self, adds_bos: bool):
        self.adds_bos = adds_bos

    def __call__(self, text, add_special_tokens=True):
        ids = [10 + len(w) for w in text.split()]
        return type("E", (), {"input_ids": ([1] if self.adds_bos and add_special_tokens else []) + ids})()


@pytest.mark.parametrize("adds_bos", [False, True])
def test_encoding_follows_the_tokenizer_unless_told(adds_bos):
    tok = _Tok(adds_bos)
    assert bos_first(tok, None) is adds_bos and bos_first(tok, True) and not bos_first(tok, False)
    t = [{"prompt": "the cat sat", "target": " on mats"}]
    for add_bos, want_bos in ((None, adds_bos), (True, True), (False, False)):
        b = encode_targets(tok, t, add_bos)
        plain = tok("the cat sat", add_special_tokens=False).input_ids + tok(" on mats",
                                                                              add_special_tokens=False).input_ids
        assert b.ids[0].tolist() == ([1] if want_bos else []) + plain
        # the marked positions are those whose next token is a target token
        marked = torch.nonzero(b.target[0]).flatten().tolist()
        assert [b.ids[0, i + 1].item() for i in marked] == b.target_ids[0]
        c = encode_controls(tok, ["the dog"], add_bos)
        assert c.ids[0].tolist() == ([1] if want_bos else []) + [13, 13]


def test_no_bos_tokenizer_never_gets_one():
    tok = _Tok(False)
    tok.bos_token_id = None
    assert not bos_first(tok, True)
    assert encode_controls(tok, ["a b"], True).ids[0].tolist() == [11, 11]


def test_config_refuses_a_non_boolean():
    with pytest.raises(GeosteerError, match="add_bos"):
        WallLearnConfig(add_bos="yes")


def test_checkpoint_records_the_encoding_and_a_resume_with_another_is_refused(tiny_model, tmp_path):
    model, tok = tiny_model("llama")
    assert not bos_first(tok, None)  # the tiny tokenizer (SmolLM2's) adds no BOS of its own
    kw = dict(candidates=2, steps=3, lr=0.2, checkpoint_every=1, kl_threshold=0.05, layers=[0])
    learn_walls(model, tok, _bank(model), TARGETS, CONTROLS, WallLearnConfig(**kw), tmp_path / "w", stop_at=0,
                log=None)
    ckpt = tmp_path / "w.train" / "checkpoint.safetensors"
    before = ckpt.read_bytes()
    with pytest.raises(GeosteerError, match=r"belongs to another run \(add_bos: checkpoint False, now True\)"):
        learn_walls(model, tok, _bank(model), TARGETS, CONTROLS, WallLearnConfig(**kw, add_bos=True),
                    tmp_path / "w", resume=True, log=None)
    assert ckpt.read_bytes() == before
    # the same encoding resumes (None resolves to what the checkpoint recorded)
    _, rep = learn_walls(model, tok, _bank(model), TARGETS, CONTROLS, WallLearnConfig(**kw, add_bos=False),
                         tmp_path / "w", resume=True, log=None)
    assert len(rep["history"]) == 3


def test_cli_bos_reaches_the_run(tiny_model, tmp_path, monkeypatch, capsys):
    model, _ = tiny_model("llama")
    src = tmp_path / "s"
    manifold.save(_bank(model), src)
    t, c = tmp_path / "t.json", tmp_path / "c.json"
    t.write_text(json.dumps(TARGETS))
    c.write_text(json.dumps(CONTROLS))
    base = ["learn", "walls", "--surfaces", str(src), "--target-file", str(t), "--control-file", str(c),
            "--out", str(tmp_path / "o"), "--model", "tiny-llama", "--threads", "1", "--steps", "1",
            "--candidates", "2", "--layers", "0", "--bos"]
    code, _, err = run_cli(monkeypatch, capsys, *base, "--json")
    assert code == 0, err
    code, _, err = run_cli(monkeypatch, capsys, *base[:-1], "--resume")  # now without --bos
    one_line_exit_2(code, err)
    assert "add_bos: checkpoint True, now False" in err
