"""paper/studies/manifold/report.py: every perplexity change is against the stock model on the same held-out
tokens (the LoRA row was once divided by a stock ppl measured on a different, shorter evaluation)."""

from __future__ import annotations

import json

import pytest

from studies.manifold import report


def _surfaces(folder, ppl_before, ppl_after, cap):
    folder.mkdir(parents=True)
    meta = {"command": "train", "training": {
        "parameter_overhead": {"surface_params": 10, "fraction": 0.1}, "tokens": 100,
        "config": {"lr": 0.1, "seed": 0},
        "heldout": {"ppl_before": ppl_before, "ppl_after": ppl_after, "max_tokens": cap}}}
    (folder / "geosteer_config.json").write_text(json.dumps({"layers": [0, 1], "meta": meta}))


def test_each_change_uses_the_stock_ppl_of_its_own_tokens(tmp_path, monkeypatch):
    res = tmp_path / "docs" / "results"
    res.mkdir(parents=True)
    _surfaces(tmp_path / "s", 10.0, 9.5, 16384)
    lora = res / "lora.json"
    lora.write_text(json.dumps({"meta": {"rank": 4, "trainable_params": 8, "model_params": 100, "layers": [0, 1],
                                         "command": "lora", "train_config": {"lr": 0.01, "eval_tokens": 32768}},
                                "rows": [{"tokens": 200, "heldout_ppl": 9.0, "seed": 0}]}))
    sweep = res / "sweep.json"
    sweep.write_text(json.dumps({"meta": {"command": "sweep"}, "rows": [
        {"source": "docs/results/lora.json", "ppl_before": 12.0, "seed": 0}]}))
    monkeypatch.setattr(report, "ROOT", tmp_path)
    monkeypatch.setattr(report, "SURFACES", {"surfaces": tmp_path / "s"})
    monkeypatch.setattr(report, "LORA", lora)
    monkeypatch.setattr(report, "SWEEP", sweep)
    rows = {(r["method"], r["heldout_tokens_cap"]): r for r in report.ppl_rows()}
    assert rows[("surfaces", 16384)]["rel_change"] == pytest.approx(9.5 / 10.0 - 1)
    assert rows[("LoRA q,v r=4", 32768)]["rel_change"] == pytest.approx(9.0 / 12.0 - 1)  # not 9 / 10 - 1
    assert rows[("stock", 32768)]["heldout_ppl"] == 12.0 and rows[("stock", 16384)]["heldout_ppl"] == 10.0
    # without a same-token reference the LoRA row has no change (never one against other tokens)
    monkeypatch.setattr(report, "SWEEP", tmp_path / "missing.json")
    lora_row = next(r for r in report.ppl_rows() if r["method"].startswith("LoRA"))
    assert "rel_change" not in lora_row


def test_the_shipped_lora_row_matches_the_equal_token_sweep():
    """On the repository's own result files: the LoRA change equals the one the equal-token sweep computed
    (paper/studies/manifold/sweep_table.py, an independent computation), -9.93 %."""
    sweep = json.loads(report.SWEEP.read_text())
    expected = next(r["change_pct"] for r in sweep["rows"] if r["source"] == "docs/results/manifold_lora_r36.json")
    lora_row = next(r for r in report.ppl_rows() if r["method"].startswith("LoRA"))
    assert 100 * lora_row["rel_change"] == pytest.approx(expected, abs=1e-9)
    assert round(100 * lora_row["rel_change"], 2) == -9.93
    table = (report.ROOT / "docs" / "manifold-study-results.md").read_text()
    assert "| 32,768 | 11.6387 | -1.283 (-9.93%) |" in table and "-6.54%" not in table


@pytest.mark.parametrize("recorded, printed", [
    ("geosteer manifold train --out A --seq-len 128 --batch 8 --batch-size-note x",
     "geosteer learn surfaces --out A --context 128 --batch-size 8 --batch-size-note x"),
    ("python studies/manifold/lora_baseline.py --batch 8", "python paper/studies/manifold/lora_baseline.py --batch 8"),
    ("python -m geosteer.manifold.studies steer --out s.json",
     "python paper/studies/manifold/steering.py steer --out s.json"),
    ("geosteer manifold wall-learn --out W && geosteer manifold explore -s W",
     "geosteer learn walls --out W && geosteer measure explore -s W"),
    ("echo geosteer manifold train", "echo geosteer manifold train"),  # only where a command starts
])
def test_commands_are_printed_in_todays_spelling(recorded, printed):
    assert report.today(recorded) == printed


def test_the_shipped_page_prints_no_old_spelling():
    """Every command on the generated page runs today; the old spellings appear only in the note naming them."""
    page = (report.ROOT / "docs" / "manifold-study-results.md").read_text()
    commands = [line for line in page.splitlines() if line.startswith(("- ", "Command:"))]
    assert commands
    for line in commands:
        for old in ("geosteer manifold train", "python studies/", "python -m geosteer", "--seq-len"):
            assert old not in line, line
