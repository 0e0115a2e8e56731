"""paper/studies/manifold/protocol_table.py: surfaces and LoRA rows against the stock ppl of the surfaces run's step 0
(the same held-out tokens), and ``--artifact`` puts the surfaces run's command and parameters into meta."""

from __future__ import annotations

import json
import sys

import pytest

from studies.manifold import protocol_table


def _inputs(tmp_path):
    history = {"meta": {"config": {"batch_size": 8, "seq_len": 128, "seed": 0}},
               "evals": [{"step": 0, "ppl": 16.0, "tokens": 4095}, {"step": 8, "ppl": 15.2, "tokens": 4095}]}
    lora = {"meta": {"rank": 48}, "rows": [{"seed": 0, "step": 8, "tokens": 8192, "heldout_ppl": 14.4,
                                           "heldout_tokens": 4095}]}
    art = tmp_path / "art"
    art.mkdir()
    (art / "geosteer_config.json").write_text(json.dumps(
        {"n_parameters": 991232, "layers": [5, 6], "base_model": "m", "meta": {"command": "geosteer manifold train"}}))
    (tmp_path / "h.json").write_text(json.dumps(history))
    (tmp_path / "l.json").write_text(json.dumps(lora))
    return art


def test_rows_and_artifact_meta(tmp_path, monkeypatch, capsys):
    art = _inputs(tmp_path)
    out = tmp_path / "t.json"
    monkeypatch.setattr(sys, "argv", ["protocol_table.py", "--surfaces", str(tmp_path / "h.json"), "--lora",
                                      str(tmp_path / "l.json"), "--artifact", str(art), "--out", str(out)])
    protocol_table.main()
    data = json.loads(out.read_text())
    got = {(r["method"], r["step"]): r["change_vs_stock"] for r in data["rows"]}
    assert got == pytest.approx({("surfaces", 0): 0.0, ("surfaces", 8): -0.05, ("lora", 8): -0.1}, abs=1e-12)
    meta = data["meta"]
    assert meta["command"].startswith("python paper/studies/manifold/protocol_table.py --surfaces ")
    assert meta["surfaces_params"] == 991232 and meta["surfaces_command"] == "geosteer manifold train"
    assert meta["surfaces_layers"] == [5, 6] and meta["model"] == "m" and meta["lora_meta"] == {"rank": 48}
    assert "| 8,192 | 15.2000 (-5.0 %) | 14.4000 (-10.0 %) |" in capsys.readouterr().out


def test_a_missing_artifact_is_one_line(tmp_path, monkeypatch, capsys):
    _inputs(tmp_path)
    monkeypatch.setattr(sys, "argv", ["protocol_table.py", "--surfaces", str(tmp_path / "h.json"), "--lora",
                                      str(tmp_path / "l.json"), "--artifact", str(tmp_path / "none"),
                                      "--out", str(tmp_path / "t.json")])
    with pytest.raises(SystemExit) as e:
        protocol_table.main()
    assert e.value.code == 2 and "no such file" in capsys.readouterr().err
    assert not (tmp_path / "t.json").exists()
