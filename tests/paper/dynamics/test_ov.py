"""OV spectrum with the pre-norm gain folded in: against numpy eigenvalues of per-head maps built from the
projection weights and the norm weights by hand, and the study's tidy file."""

import json

import numpy as np
import pytest
import torch

from geosteer import anatomy
from geosteer.dynamics.ov import ov_rows
from geosteer_paper.dynamics.fields import effective_ov
from tests.cli_helpers import run_cli


def _randomise_attn_norms(model, seed: int) -> None:
    """Non-uniform pre-attention gains, so folding them in changes the maps (tiny models start at γ = 1)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for b in anatomy(model).blocks:
            w = b.attn_norm.weight
            w.copy_(torch.rand(w.shape, generator=gen) * 1.5 + 0.25)


def _hand_gain(model, layer: int) -> np.ndarray:
    """RMSNorm on a unit vector: γ / sqrt(1/d + ε), γ = w (Llama) or 1 + w (Gemma-3), from the parameters."""
    an = anatomy(model)
    norm = an.blocks[layer].attn_norm
    w = norm.weight.detach().double().numpy()
    gamma = 1.0 + w if model.config.model_type.startswith("gemma") else w
    eps = float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6)))
    return gamma / np.sqrt(1.0 / an.d_model + eps)


def _hand_head_map(model, layer: int, head: int) -> np.ndarray:
    """W_O,h W_V,g(h) (d × d) from o_proj / v_proj weights."""
    an = anatomy(model)
    att = an.blocks[layer].attn
    dv, g = an.head_dim, head // an.n_rep
    wo = att.o_proj.weight.detach().double().numpy()[:, head * dv:(head + 1) * dv]
    wv = att.v_proj.weight.detach().double().numpy()[g * dv:(g + 1) * dv]
    return wo @ wv


def _positive(lam: complex, scale: float) -> bool:
    return bool(abs(lam.imag) <= 1e-6 * abs(lam) and lam.real > 1e-9 * scale)


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_gain_reading_matches_numpy_on_hand_built_maps(family):
    from geosteer import load_model

    model, _ = load_model(f"tiny-{family}")  # its own copy: the norm weights are changed below
    _randomise_attn_norms(model, seed=3)
    an = anatomy(model)
    rows = {(r["layer"], r["head"]): r for r in ov_rows(model, "gain")}
    raw = {(r["layer"], r["head"]): r for r in ov_rows(model, "none")}
    changed = 0
    for layer in range(an.n_layers):
        gain = _hand_gain(model, layer)
        total = np.zeros((an.d_model, an.d_model))
        for h in range(an.n_heads):
            m = _hand_head_map(model, layer, h) * gain[None, :]
            total += m
            ev = np.linalg.eigvals(m)  # the full d × d spectrum, d − dv of it zero
            scale = np.abs(ev).max()
            r = rows[(layer, h)]
            assert r["ov_norm"] == "gain"
            assert r["dominant_by_real_positive"] == _positive(ev[np.argmax(ev.real)], scale)
            assert r["dominant_positive"] == _positive(ev[np.argmax(np.abs(ev))], scale)
            assert r["max_real_part"] == pytest.approx(ev.real.max(), abs=1e-6 * scale)
            ratio = np.linalg.norm(m - m.T) / np.linalg.norm(m + m.T)
            assert r["skew_sym_ratio"] == pytest.approx(ratio, rel=1e-6)
            changed += abs(r["skew_sym_ratio"] - raw[(layer, h)]["skew_sym_ratio"]) > 1e-3
        # the same gain as the critical study's effective V: the heads' maps sum to it
        np.testing.assert_allclose(effective_ov(model, layer, "gain").numpy(), total,
                                   atol=1e-5 * np.abs(total).max())
    assert changed > 0  # non-uniform gains change the maps the reading is taken on


def test_unknown_ov_norm_is_refused(tiny_model):
    from geosteer.errors import GeosteerError

    model, _ = tiny_model("llama")
    with pytest.raises(GeosteerError, match="valid: gain, none"):
        ov_rows(model, "layer")


def test_ov_spectrum_study_writes_both_readings(tmp_path, monkeypatch, capsys):
    out = tmp_path / "ov.json"
    code, _, _ = run_cli(monkeypatch, capsys, "study", "dynamics", "ov-spectrum", "-m", "tiny-llama", "--out", str(out))
    assert code == 0
    saved = json.loads(out.read_text())
    heads = [r for r in saved["rows"] if r["table"] == "head"]
    overall = {r["ov_norm"]: r for r in saved["rows"] if r["table"] == "summary" and r["layer"] == "all"}
    assert set(overall) == {"none", "gain"} and saved["meta"]["ov_norms"] == ["none", "gain"]
    for norm, s in overall.items():
        mine = [r for r in heads if r["ov_norm"] == norm]
        assert s["heads"] == len(mine) == 3 * 4  # tiny-llama: 3 layers × 4 query heads
        assert s["frac_dominant_by_real_positive"] == pytest.approx(
            sum(r["dominant_by_real_positive"] for r in mine) / len(mine), abs=1e-12)
    code, _, err = run_cli(monkeypatch, capsys, "study", "dynamics", "ov-spectrum", "-m", "tiny-llama",
                           "--ov-norms", "gain,sideways")
    assert code == 2 and err.startswith("error: ") and "unknown ov_norm (--ov-norms) 'sideways'" in err
