"""The significance helper against scipy.stats (bootstrap percentile interval, permutation tests)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from geosteer.errors import GeosteerError
from geosteer_paper.dynamics.significance import bootstrap_interval, compare, permutation_p


def _diff(x, y, axis=-1):
    return np.mean(x, axis=axis) - np.mean(y, axis=axis)


def test_paired_permutation_is_exact_against_scipy():
    rng = np.random.default_rng(0)
    a = rng.normal(0.3, 1.0, 10)
    b = a + rng.normal(-0.4, 0.5, 10)
    ref = stats.permutation_test((a, b), _diff, permutation_type="samples", n_resamples=np.inf,
                                 alternative="two-sided", vectorized=True).pvalue
    assert permutation_p(a, b, paired=True) == pytest.approx(ref, rel=1e-9)


def test_two_sample_permutation_and_bootstrap_against_scipy():
    rng = np.random.default_rng(1)
    a, b = rng.normal(0.0, 1.0, 18), rng.normal(0.8, 1.0, 30)
    ref = stats.permutation_test((a, b), _diff, permutation_type="independent", n_resamples=20000,
                                 alternative="two-sided", vectorized=True, random_state=5).pvalue
    p = permutation_p(a, b, paired=False)
    assert abs(p - ref) < 0.01 + 0.1 * ref  # Monte-Carlo on both sides
    ci = stats.bootstrap((a, b), _diff, method="percentile", n_resamples=20000, vectorized=True,
                         random_state=5).confidence_interval
    lo, hi = bootstrap_interval(a, b, paired=False, n_boot=20000)
    width = ci.high - ci.low
    assert abs(lo - ci.low) < 0.05 * width and abs(hi - ci.high) < 0.05 * width


def test_paired_bootstrap_against_scipy_and_record():
    rng = np.random.default_rng(2)
    a = rng.normal(1.0, 1.0, 12)
    b = a - 0.5 + rng.normal(0, 0.3, 12)
    ci = stats.bootstrap((a - b,), np.mean, method="percentile", n_resamples=20000,
                         random_state=3).confidence_interval
    lo, hi = bootstrap_interval(a, b, paired=True, n_boot=20000)
    width = ci.high - ci.low
    assert abs(lo - ci.low) < 0.05 * width and abs(hi - ci.high) < 0.05 * width
    rec = compare(a, b, paired=True, unit="seeds")
    assert rec["unit"] == "seeds" and rec["ci_low"] < rec["diff"] < rec["ci_high"]
    assert rec["diff"] == pytest.approx(float(np.mean(a - b)), rel=1e-12)


def test_bad_samples_refused():
    with pytest.raises(GeosteerError):
        compare([1.0, 2.0], [1.0, 2.0, 3.0], paired=True, unit="seeds")
    with pytest.raises(GeosteerError):
        compare([1.0], [1.0, 2.0], paired=False, unit="layers")


def _write_results(folder, diag: dict[str, list[float]], comm: dict[str, list[float]]):
    import json

    folder.mkdir()
    rows = [{"table": "layers", "layer": i, "metric": q, "mean": v, "std": 0.0, "n": 1}
            for q, vals in diag.items() for i, v in enumerate(vals)]
    (folder / "diagnose.json").write_text(json.dumps({"meta": {}, "rows": rows}))
    n = len(next(iter(comm.values())))
    crow = [{"table": "layers", "layer": i, **{q: comm[q][i] for q in comm}} for i in range(n)]
    (folder / "commutator.json").write_text(json.dumps({"meta": {}, "rows": crow}))


def test_significance_study_reads_files_and_refuses_missing(tmp_path, monkeypatch, capsys):
    import json

    from tests.cli_helpers import run_argv as run

    DIAGNOSE = ("deficit", "ffn_tangential_frac", "defect", "ddiv_attn", "ddiv_ffn")
    COMMUTATOR = ("commutator", "ffn_half", "attn_half", "reorder_angle_deg", "cos_pred_vs_measured")

    rng = np.random.default_rng(4)
    for name, shift, n in (("a", 0.0, 6), ("b", 1.0, 5)):
        _write_results(tmp_path / name, {q: list(rng.normal(shift, 0.1, n)) for q in DIAGNOSE},
                       {q: list(rng.normal(shift, 0.1, n)) for q in COMMUTATOR})
    out = tmp_path / "sig.json"
    code, _, _ = run(["study", "dynamics", "significance", "--a", str(tmp_path / "a"), "--b", str(tmp_path / "b"),
                      "--out", str(out)], monkeypatch, capsys)
    assert code == 0
    rows = json.loads(out.read_text())["rows"]
    assert {r["quantity"] for r in rows} == set(DIAGNOSE) | set(COMMUTATOR)
    assert all(r["unit"] == "layers" and r["n_a"] == 6 and r["n_b"] == 5 and r["ci_high"] < 0 for r in rows)
    code, _, err = run(["study", "dynamics", "significance", "--a", str(tmp_path / "nope"), "--b", str(tmp_path / "b")],
                       monkeypatch, capsys)
    assert code == 2 and err.strip().startswith("error:") and "nope" in err and "Traceback" not in err
