"""`geosteer study dynamics critical|commutator|pressure|gain-depth`: tidy files; bad input → one `error:` line,
exit 2."""

import json

import pytest

from tests.cli_helpers import run_argv as run

DYN = ("study", "dynamics")  # the paper studies' spelling


@pytest.mark.parametrize("argv, message", [
    ([*DYN, "critical", "-m", "tiny-llama", "--layers", "0", "--fields", "ov,attn"], "unknown field 'attn'"),
    ([*DYN, "critical", "-m", "tiny-llama", "--layers", "7"], "layer 7 out of range"),
    ([*DYN, "critical", "-m", "tiny-llama", "--layers", "0", "--threshold", "0"], "threshold must be in (0, 1)"),
    ([*DYN, "critical", "-m", "tiny-llama", "--layers", "0", "--threshold", "-1"], "threshold"),
    ([*DYN, "critical", "-m", "tiny-llama", "--layers", "0", "--alpha", "-0.5"], "--alpha must be finite"),
    ([*DYN, "critical", "-m", "tiny-llama", "--layers", "0", "--ov-norm", "half"], "unknown ov_norm"),
    ([*DYN, "pressure", "-m", "tiny-llama", "--betas", "1,0"], "beta must be finite and > 0"),
    ([*DYN, "pressure", "-m", "tiny-llama", "--variants", "full,sideways", "--tokens", "64",
      "--context", "32"], "unknown FFN variant 'sideways'"),
    ([*DYN, "pressure", "-m", "tiny-llama", "--layers", "0-5"], "out of range"),
    ([*DYN, "commutator", "-m", "tiny-gpt_neox", "--tokens", "64", "--context", "32"], "sequential"),
    ([*DYN, "commutator", "-m", "tiny-llama", "--h", "2", "--tokens", "64", "--context", "32"], "step h"),
    ([*DYN, "gain-depth", "-m", "tiny-llama", "--depths", "0,1.5"], "depth fractions"),
    ([*DYN, "split-options", "-m", "tiny-llama", "--references", "read,output"], "unknown reference"),
])
def test_bad_input_exits_2(argv, message, monkeypatch, capsys):
    code, _, err = run(argv, monkeypatch, capsys)
    assert code == 2, err
    assert err.strip().splitlines()[-1].startswith("error: ") and message in err and "Traceback" not in err


def test_critical_writes_tidy_records(tmp_path, monkeypatch, capsys):
    out = tmp_path / "c.json"
    code, stdout, _ = run([*DYN, "critical", "-m", "tiny-llama", "--layers", "1", "--real", "4", "--random",
                           "8", "--steps", "150", "--tokens", "64", "--context", "32", "--json", "--out", str(out),
                           "--csv", str(tmp_path / "c.csv")], monkeypatch, capsys)
    assert code == 0
    shown = json.loads(stdout)
    stages = {(s["field"], s["stage"]) for s in shown["summary"]}
    assert ("ov", "exact") in stages and ("full", "refined") in stages
    saved = json.loads(out.read_text())
    assert saved["meta"]["threshold"] == 0.05 and saved["meta"]["layers"] == [1]
    assert all("u" not in r for r in saved["rows"])
    assert (tmp_path / "c.csv").read_text().startswith("table,")


def test_pressure_and_commutator_write_records(tmp_path, monkeypatch, capsys):
    code, _, _ = run([*DYN, "pressure", "-m", "tiny-llama", "--betas", "1,3", "--variants", "full,zero",
                      "--tokens", "64", "--context", "32", "--out", str(tmp_path / "p.json")], monkeypatch, capsys)
    assert code == 0
    rows = json.loads((tmp_path / "p.json").read_text())["rows"]
    assert len([r for r in rows if r["table"] == "summary"]) == 4
    code, _, _ = run([*DYN, "commutator", "-m", "tiny-llama", "--tokens", "64", "--context", "32",
                      "--out", str(tmp_path / "k.csv")], monkeypatch, capsys)
    assert code == 0 and (tmp_path / "k.csv").read_text().startswith("table,")
