"""``geosteer learn loreft``: a run writes the artifact the recipe applies; bad input is one line before the
model loads."""

from __future__ import annotations

import json

from tests.cli_helpers import run_cli

PROMPTS = ["The cat sat on the", "Paris is the capital of"]
CONTROLS = ["Berlin is a city in", "Red, green and"]


def _files(tmp_path):
    t, c = tmp_path / "targets.json", tmp_path / "controls.json"
    t.write_text(json.dumps([{"prompt": p, "target": " yes"} for p in PROMPTS]))
    c.write_text(json.dumps(CONTROLS))
    return str(t), str(c)


def test_learn_then_generate_with_the_recipe_key(tmp_path, monkeypatch, capsys):
    t, c = _files(tmp_path)
    out = tmp_path / "lo"
    code, text, err = run_cli(monkeypatch, capsys, "learn", "loreft", "-m", "tiny-llama", "--target-file", t,
                              "--control-file", c, "--layers", "1", "--rank", "2", "--steps", "2", "-o", str(out),
                              "--json")
    assert code == 0, err
    doc = json.loads(text)
    assert doc["layers"] == [1] and doc["rank"] == 2 and "target_gain" in doc
    code, text, err = run_cli(monkeypatch, capsys, "generate", "-m", "tiny-llama", "-p", "hi", "--max-new-tokens",
                              "2", "--set", f"loreft={out}", "--set", "loreft_strength=0.5")
    assert code == 0, err


def test_bad_rank_is_one_line(tmp_path, monkeypatch, capsys):
    t, c = _files(tmp_path)
    code, _, err = run_cli(monkeypatch, capsys, "learn", "loreft", "-m", "tiny-llama", "--target-file", t,
                           "--control-file", c, "--rank", "0", "-o", str(tmp_path / "lo"))
    assert code == 2 and "--rank" in err and len(err.strip().splitlines()) <= 3
