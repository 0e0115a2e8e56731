"""`geosteer dynamics ...`: tidy output files, and bad input → one `error:` line with exit code 2."""

import json
import sys

import pytest

from geosteer.cli import main


def run(argv, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["geosteer", *argv])
    code = 0
    try:
        main()
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("argv, message", [
    (["dynamics", "ablate", "-m", "tiny-llama", "--variants", "sideways", "--tokens", "64",
      "--seq-len", "32"],
     "unknown FFN variant 'sideways'"),
    (["dynamics", "ablate", "-m", "tiny-llama", "--layers", "0-9", "--tokens", "64", "--seq-len", "32"],
     "layer 3 out of range: this model has layers 0..2"),
    (["dynamics", "diagnose", "-m", "tiny-llama", "--topk", "0,4"], "top-k needs k >= 1"),
    (["dynamics", "gates", "-m", "tiny-llama"], "give exactly one of --save"),
])
def test_bad_input_exits_2(argv, message, monkeypatch, capsys):
    code, _, err = run(argv, monkeypatch, capsys)
    assert code == 2
    assert err.startswith("error: ") and message in err and "Traceback" not in err


def test_diagnose_writes_tidy_records(tmp_path, monkeypatch, capsys):
    out = tmp_path / "d.json"
    code, stdout, _ = run(["dynamics", "diagnose", "-m", "tiny-gpt_neox", "--tokens", "64", "--seq-len", "32",
                           "--topk", "2", "--json", "--out", str(out), "--csv", str(tmp_path / "d.csv")],
                          monkeypatch, capsys)
    assert code == 0
    shown = json.loads(stdout)
    assert len(shown["layers"]) == 3 and shown["ov"]["heads"] == 12 and shown["topk"][0]["k"] == 2
    saved = json.loads(out.read_text())
    tables = {r["table"] for r in saved["rows"]}
    assert tables == {"layers", "topk_layers", "topk", "ov"}
    assert saved["meta"]["tokens"] == 64
    assert (tmp_path / "d.csv").read_text().startswith("table,")


@pytest.mark.real
def test_real_model_diagnostics_smoke(smollm2):
    import torch

    from geosteer.dynamics.diagnostics import corpus_windows, diagnose, wide
    from geosteer.dynamics.variants import FFNVariant
    from geosteer.steer import steer

    model, tok = smollm2
    ids = corpus_windows(tok, "heldout", 64, 64)
    rows = wide(diagnose(model, ids))
    assert len(rows) == 30
    assert all(abs(r["cos_full"] - 1) < 1e-3 and 0 < r["deficit"] < 1 and r["defect"] > 0 for r in rows)
    with torch.no_grad():
        stock = model(ids).logits
        with steer(model, FFNVariant("full")):
            assert torch.equal(model(ids).logits, stock)
