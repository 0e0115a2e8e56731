"""``geosteer bench steering`` end to end on a tiny model: the results document and the figures."""

from __future__ import annotations

import json

from tests.cli_helpers import run_cli

ROW_KEYS = {"concept", "lever", "strength", "operating_point", "concept_score", "fluency", "control_kl", "score",
            "params"}


def test_bench_steering_writes_rows_with_the_stock_reference(tmp_path, monkeypatch, capsys, concept_file):
    out = tmp_path / "bench"
    code, stdout, err = run_cli(monkeypatch, capsys, "bench", "steering", "-m", "tiny-llama", "--concepts",
                                str(concept_file), "--out", str(out), "--levers", "prompting", "--seed", "3")
    assert code == 0, err
    doc = json.loads((out / "results.json").read_text())
    assert doc["reference"].startswith("stock model") and doc["meta"]["seed"] == 3
    assert [r["lever"] for r in doc["rows"]] == ["stock", "prompting"]
    for r in doc["rows"]:
        assert ROW_KEYS <= set(r)
        assert r["control_kl"]["mean"] <= doc["meta"]["kl_budget"]
        assert 0.0 <= r["score"]["mean"] <= 1.0
    assert {c["lever"] for c in doc["curves"]} == {"prompting"}
    assert (out / "figures" / "cats.html").is_file()
    assert "| prompting |" in stdout
