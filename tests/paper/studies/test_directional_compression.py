"""paper/studies/directional/compression.py: its summary rows and Spearman ρ against independent computations, and
a tiny run (tiny-llama, three methods) that writes both files with the command in meta."""

import json

import pytest
from scipy.stats import rankdata

from studies.directional.compression import ERRORS, SITES, main, method_row, spearman_rows


def _layer_rows(scale: float) -> list[dict]:
    return [{"layer": layer, "site": site, **{f"{e}_mean": scale * (layer + 1) * (i + 1) for i, e in
                                              enumerate(ERRORS)}}
            for layer in range(3) for site in SITES]


def test_method_row_averages_each_error_over_layers():
    row = method_row("rtn4", 15.0, {"method": "rtn4", "bits": 4}, _layer_rows(0.1))
    assert row["method"] == "rtn4" and row["ppl"] == 15.0 and row["bits"] == 4
    for site in SITES:
        for i, e in enumerate(ERRORS):
            assert row[f"{site}_{e}"] == pytest.approx(0.1 * (1 + 2 + 3) / 3 * (i + 1))


def test_spearman_rows_are_rank_correlations_across_methods():
    ppl = [20.0, 12.0, 30.0, 25.0]
    err = [0.3, 0.1, 0.2, 0.4]
    summary = [{"method": "none", "ppl": 10.0}] + [
        {"method": f"m{i}", "ppl": p, **{f"{s}_{e}": x for s in SITES for e in ERRORS}}
        for i, (p, x) in enumerate(zip(ppl, err, strict=True))]
    rows = spearman_rows(summary)
    ra, rb = rankdata(err) - 2.5, rankdata(ppl) - 2.5
    rho = float((ra * rb).sum() / ((ra ** 2).sum() * (rb ** 2).sum()) ** 0.5)
    assert len(rows) == 9 and all(r["spearman_rho_vs_ppl"] == pytest.approx(rho) and r["n_methods"] == 4
                                  for r in rows)
    assert spearman_rows(summary[:3]) == []  # under three methods: no correlation


def test_tiny_run_writes_both_files(tmp_path, capsys):
    args = ["--model", "tiny-llama", "--methods", "rtn4,wanda50,wanda2:4", "--calib-seqs", "1", "--seq-len", "16",
            "--prompts", "1", "--ppl-tokens", "48", "--context", "32", "--stride", "32", "--out-dir", str(tmp_path)]
    main(args)
    doc = json.loads((tmp_path / "compression_summary.json").read_text())
    assert doc["meta"]["command"] == "python paper/studies/directional/compression.py " + " ".join(args)
    assert [r["method"] for r in doc["rows"]] == ["none", "rtn4", "wanda50", "wanda2:4"]
    assert len(doc["meta"]["spearman"]) == 9
    layers = (tmp_path / "compression_layers.csv").read_text().splitlines()
    assert layers[0].startswith("method,") and len(layers) > 3
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(["--methods", "gptq9", "--out-dir", str(tmp_path / "x")])
    assert e.value.code == 2 and capsys.readouterr().err.startswith("error: unknown compression method 'gptq9'")
    assert not (tmp_path / "x").exists()


def test_byte_level_base_runs_awq_and_gptq(tmp_path):
    """A folder from compression_base.py (an untrained tiny byte model here): bytes in, per-byte PPL out."""
    from geosteer_paper.directional.pretrain import small_model

    base = tmp_path / "base"
    small_model(d_model=64, layers=1, heads=2, ffn=192, ctx=16, seed=0).save_pretrained(base)
    (base / "base_training.json").write_text("{}")
    args = ["--model", str(base), "--methods", "rtn4,gptq4,awq4-perp4", "--calib-seqs", "1", "--seq-len", "16",
            "--prompts", "1", "--ppl-batches", "1", "--out-dir", str(tmp_path / "out")]
    main(args)
    doc = json.loads((tmp_path / "out" / "compression_summary.json").read_text())
    assert doc["meta"]["tokenizer"] == "bytes"
    rows = {r["method"]: r for r in doc["rows"]}
    assert set(rows) == {"none", "rtn4", "gptq4", "awq4-perp4"}
    assert 200 < rows["none"]["ppl"] < 300  # an untrained model over 256 bytes is near uniform
    assert all(rows[m]["block_total_err"] > 0 for m in ("rtn4", "gptq4", "awq4-perp4"))
    assert len(doc["meta"]["spearman_quantisers"]) == 9


def test_a_rerun_of_the_same_command_resumes_the_finished_methods(tmp_path, monkeypatch, capsys):
    """A run cut after its first method: the rerun keeps that method's rows (and the uncompressed PPL)
    unrecomputed and adds the rest; another command starts afresh."""
    import studies.directional.compression as comp

    args = ["--model", "tiny-llama", "--methods", "rtn4,wanda50,wanda2:4", "--calib-seqs", "1", "--seq-len", "16",
            "--prompts", "1", "--ppl-tokens", "48", "--context", "32", "--stride", "32", "--out-dir", str(tmp_path)]
    main(args)
    full = json.loads((tmp_path / "compression_summary.json").read_text())
    full_csv = (tmp_path / "compression_layers.csv").read_text()
    cut = {**full, "rows": full["rows"][:2]}  # none and rtn4 finished; the layer CSV still holds every method
    cut["rows"][1] = {**cut["rows"][1], "ppl": 123.0}  # a marker: a resumed method is not recomputed
    (tmp_path / "compression_summary.json").write_text(json.dumps(cut))
    done = []
    real = comp.method_row
    monkeypatch.setattr(comp, "method_row", lambda meth, *a: done.append(meth) or real(meth, *a))
    capsys.readouterr()
    main(args)
    assert "resuming: none, rtn4 done" in capsys.readouterr().out and done == ["wanda50", "wanda2:4"]
    doc = json.loads((tmp_path / "compression_summary.json").read_text())
    assert [r["method"] for r in doc["rows"]] == ["none", "rtn4", "wanda50", "wanda2:4"]
    assert doc["rows"][1]["ppl"] == 123.0 and doc["rows"][0] == full["rows"][0]
    assert doc["rows"][2:] == full["rows"][2:] and len(doc["meta"]["spearman"]) == 9
    assert (tmp_path / "compression_layers.csv").read_text() == full_csv
    done.clear()
    main([*args[:-2], "--ppl-tokens", "40", "--out-dir", str(tmp_path)])  # another command: all three again
    assert done == ["rtn4", "wanda50", "wanda2:4"]
