"""`geosteer dynamics ...`: tidy output files, and bad input → one `error:` line with exit code 2."""

import json

import pytest

from tests.cli_helpers import run_cli

DYN = ("study", "dynamics")  # the paper studies' spelling


@pytest.mark.parametrize("argv, message", [
    ([*DYN, "ablate", "-m", "tiny-llama", "--variants", "sideways", "--tokens", "64",
      "--context", "32"],
     "unknown FFN variant 'sideways'"),
    ([*DYN, "ablate", "-m", "tiny-llama", "--layers", "0-9", "--tokens", "64", "--context", "32"],
     "layer 3 out of range: this model has layers 0..2"),
    (["measure", "diagnose", "-m", "tiny-llama", "--topk", "0,4"], "top-k needs k >= 1"),
    (["learn", "gates", "-m", "tiny-llama"], "Missing option '--out'"),
])
def test_bad_input_exits_2(argv, message, monkeypatch, capsys):
    code, _, err = run_cli(monkeypatch, capsys, *argv)
    assert code == 2
    assert err.startswith("error: ") and message in err and "Traceback" not in err


def test_diagnose_writes_tidy_records(tmp_path, monkeypatch, capsys):
    out = tmp_path / "d.json"
    code, stdout, _ = run_cli(monkeypatch, capsys, "measure", "diagnose", "-m", "tiny-gpt_neox", "--tokens", "64",
                              "--context", "32", "--topk", "2", "--json", "--out", str(out),
                              "--csv", str(tmp_path / "d.csv"))
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
    from geosteer.interventions import steer

    model, tok = smollm2
    ids = corpus_windows(tok, "heldout", 64, 64)
    rows = wide(diagnose(model, ids))
    assert len(rows) == 30
    assert all(abs(r["cos_full"] - 1) < 1e-3 and 0 < r["deficit"] < 1 and r["defect"] > 0 for r in rows)
    with torch.no_grad():
        stock = model(ids).logits
        with steer(model, FFNVariant("full")):
            assert torch.equal(model(ids).logits, stock)


def test_parallelize_measured_order_and_defect_correlation(tmp_path, monkeypatch, capsys):
    """Single-layer rows equal an independent paired evaluation; the measured order is ascending in them."""
    import torch

    from geosteer import load_model
    from geosteer.dynamics.diagnostics import corpus_windows
    from geosteer.dynamics.variants import Parallelize
    from geosteer.interventions import steer

    out = tmp_path / "p.json"
    code, stdout, _ = run_cli(monkeypatch, capsys, *DYN, "parallelize", "-m", "tiny-llama", "--counts", "0,1,3",
                              "--seeds", "1", "--defect-tokens", "64", "--tokens", "64", "--context", "32", "--json",
                              "--out", str(out))
    assert code == 0
    shown = json.loads(stdout)
    single = {r["layer"]: r["loss_increase"] for r in shown["curve"] if r["strategy"] == "single"}
    assert sorted(single) == [0, 1, 2]
    measured = [r for r in shown["curve"] if r["strategy"] == "measured"]
    assert [r["n_parallel"] for r in measured] == [0, 1, 3]
    assert measured[1]["loss_increase"] == pytest.approx(min(single.values()))
    assert measured[2]["loss_increase"] == pytest.approx(next(r["loss_increase"] for r in shown["curve"]
                                                              if r["strategy"] == "low" and r["n_parallel"] == 3))
    # independent check of one single-layer number: HF's own loss with and without Parallelize([1])
    model, tok = load_model("tiny-llama")
    ids = corpus_windows(tok, "heldout", 64, 32)
    with torch.no_grad():
        base = model(input_ids=ids, labels=ids).loss.item()
        with steer(model, Parallelize([1])):
            par = model(input_ids=ids, labels=ids).loss.item()
    # a difference of two float32 mean losses (~10 nats) computed in other batch shapes: each term rounds at
    # ~1e-6 relative, so the tolerance sits above that (1e-5 of the terms), not at the difference's own scale
    assert single[1] == pytest.approx(par - base, abs=1e-5 * max(abs(base), abs(par)))
    assert set(shown["defect_vs_single"]) == {"spearman_rho", "p_value", "layers"}
    tables = {r["table"] for r in json.loads(out.read_text())["rows"]}
    assert tables == {"defect", "curve", "single", "safe", "defect_vs_single"}


@pytest.mark.parametrize("args,needle", [
    ([*DYN, "gains", "-m", "tiny-llama", "--values", "nan"], "bad --values 'nan'"),
    ([*DYN, "gains", "-m", "tiny-llama", "--values", ""], "bad --values ''"),
    ([*DYN, "gain-depth", "-m", "tiny-llama", "--depths", "1,inf"], "bad --depths '1,inf'"),
    ([*DYN, "parallelize", "-m", "tiny-llama", "--threshold", "nan"], "--threshold must be a finite number"),
    ([*DYN, "parallelize", "-m", "tiny-llama", "--seeds", "1000000"], "'--seeds'"),
    ([*DYN, "basins", "-m", "tiny-llama", "--layer", "1", "--grid", "100000"], "'--grid'"),
    ([*DYN, "basins", "-m", "tiny-llama", "--layer", "7"], "layer 7 out of range"),
    (["measure", "diagnose", "-m", "tiny-gpt2", "--context", "1000"], "--context 1000 is longer than the model's 512"),
    (["measure", "diagnose", "-m", "tiny-llama", "--split", "dev"], "unknown corpus split (--split) 'dev'"),
    (["learn", "gates", "-m", "tiny-llama", "--out", "g", "--context", "4096"], "--context 4096 is longer"),
    ([*DYN, "ablate", "-m", "tiny-llama", "--layers", "9"], "layer 9 out of range"),
    ([*DYN, "continuation", "-m", "tiny-llama", "--layer", "0", "--ov-norm", "l2"], "unknown ov_norm"),
    ([*DYN, "anchors", "-m", "tiny-llama", "--score", "best"], "unknown anchor score (--score) 'best'"),
    ([*DYN, "prefix-spread", "-m", "tiny-llama", "--prefix-file", "missing.txt"], "cannot read prefix file"),
    ([*DYN, "edit-specificity", "-m", "tiny-llama", "--kinds", "sideways"], "unknown edit kind 'sideways'"),
    ([*DYN, "edit-linearity", "-m", "tiny-llama", "--scales", "1"], "at least 2 different sizes"),
    ([*DYN, "pressure", "-m", "tiny-llama", "--mode", "bogus"], "unknown pressure mode 'bogus'"),
    ([*DYN, "gain-depth", "-m", "tiny-llama", "--depths", "2"], "depth fractions must be in [0, 1]"),
    ([*DYN, "critical", "-m", "tiny-llama", "--layers", "0", "--refine-iters", "-1"], "'--refine-iters'"),
    ([*DYN, "critical", "-m", "tiny-llama", "--layers", "0", "--real", "0", "--random", "0"], "both 0"),
    ([*DYN, "commutator", "-m", "tiny-llama", "--h", "0"], "--h"),
    ([*DYN, "parallelize", "-m", "tiny-llama", "--counts", "99"], "--counts: 99 parallel layers"),
    ([*DYN, "parallelize", "-m", "tiny-llama", "--counts", "-1"], "--counts: -1 parallel layers"),
    ([*DYN, "prefix-spread", "-m", "tiny-llama", "--suffix", " "], "--suffix is empty"),
    (["learn", "gates", "-m", "tiny-llama", "--out", "g", "--tokens", "0"], "'--tokens'"),
    (["learn", "gates", "-m", "tiny-llama", "--out", "g", "--eval-context", "4096"], "--eval-context 4096 is longer"),
    ([*DYN, "anchors", "-m", "tiny-llama", "--k", "1000"], "--k 1000 is too large for prefixes of 32"),
    ([*DYN, "phase", "-m", "tiny-llama", "--layer", "0", "--dims", "2,64"], "need k in [1, 63]"),
])
def test_dynamics_verbs_refuse_before_any_weights_are_built(monkeypatch, capsys, tmp_path, args, needle):
    from tests.cli_helpers import refused_before_load

    monkeypatch.chdir(tmp_path)
    assert needle in refused_before_load(monkeypatch, capsys, *args)
    assert list(tmp_path.iterdir()) == []


def test_parallelize_cache_is_reused_and_refused_for_another_run(tmp_path, monkeypatch, capsys):
    """A loss already in --cache is taken as it is (a planted value shows up); a cache of another run is
    refused with one line before the model loads."""
    from tests.cli_helpers import refused_before_load

    cache = tmp_path / "losses.json"
    argv = [*DYN, "parallelize", "-m", "tiny-llama", "--counts", "0,1", "--seeds", "1", "--no-measured",
            "--defect-tokens", "64", "--tokens", "64", "--context", "32", "--cache", str(cache), "--json"]
    code, stdout, _ = run_cli(monkeypatch, capsys, *argv)
    assert code == 0
    first = json.loads(stdout)["curve"]
    saved = json.loads(cache.read_text())
    assert saved["run"]["model"] == "tiny-llama" and saved["run"]["tokens"] == 64
    for r in first:  # every evaluated layer set is in the cache with its loss
        assert saved["losses"][r["layers"]] == r["loss"]
    planted = first[0]["loss_stock"] + 1.5
    low1 = next(r for r in first if r["strategy"] == "low" and r["n_parallel"] == 1)
    saved["losses"][low1["layers"]] = planted
    cache.write_text(json.dumps(saved))
    code, stdout, _ = run_cli(monkeypatch, capsys, *argv)
    assert code == 0
    again = next(r for r in json.loads(stdout)["curve"] if r["strategy"] == "low" and r["n_parallel"] == 1)
    assert again["loss"] == planted and again["loss_increase"] == pytest.approx(1.5, abs=1e-9)
    other = [a if a != "64" else "128" for a in argv]  # another --tokens: another run
    assert "holds losses of another run" in refused_before_load(monkeypatch, capsys, *other)
