"""The fluency term of ``train_surfaces(kl_weight=β)``: cross-entropy + β · KL(P_surfaces ‖ P_stock) per
position, against a per-position float64 loop; the reference is the stock model; a large β keeps the trained
surfaces closer to the stock model than β = 0 on the same run."""

from __future__ import annotations

import pytest
import torch

from geosteer.errors import GeosteerError
from geosteer.manifold import read_config, uninstall
from geosteer.manifold.train import train_surfaces
from geosteer.train import TrainConfig
from geosteer.train.objective import lm_kl_loss, reverse_kl
from tests.manifold.conftest import TEXT


def _cfg(**kw):
    d = dict(lr=5e-2, steps=6, batch_size=2, seq_len=24, checkpoint_every=100, log_every=100,
             eval_context=48, eval_stride=24, eval_tokens=96)
    d.update(kw)
    return TrainConfig(**d)


def test_reverse_kl_equals_a_per_position_loop():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(2, 5, 11, generator=g), torch.randn(2, 5, 11, generator=g)
    want = []
    for i in range(2):
        for t in range(5):
            p = torch.softmax(a[i, t].double(), -1)
            q = torch.softmax(b[i, t].double(), -1)
            want.append(sum(float(p[v] * (p[v].log() - q[v].log())) for v in range(11)))
    assert float(reverse_kl(a, b)) == pytest.approx(sum(want) / len(want), rel=1e-5)
    assert float(reverse_kl(a, a)) == pytest.approx(0.0, abs=1e-6)


def test_lm_kl_loss_is_cross_entropy_plus_weighted_kl(tiny):
    model, tok = tiny
    batch = tok(TEXT[:120], return_tensors="pt").input_ids
    shifted = lambda m, x: m(input_ids=x).logits + torch.linspace(0, 1, m.config.vocab_size)  # noqa: E731
    total, logged = lm_kl_loss(shifted, 0.5)(model, batch)
    with torch.no_grad():
        logits = model(input_ids=batch).logits[0, :-1].double()
    ce = torch.nn.functional.cross_entropy(logits, batch[0, 1:])
    kl = reverse_kl(logits, logits + torch.linspace(0, 1, logits.shape[-1]).double())
    assert logged["ce"] == pytest.approx(float(ce), rel=1e-5) and logged["kl"] == pytest.approx(float(kl), rel=1e-4)
    assert float(total) == pytest.approx(float(ce) + 0.5 * float(kl), rel=1e-5) and logged["kl"] > 0


def _kl_to_stock(model, tok) -> float:
    x = tok(TEXT[:300], return_tensors="pt").input_ids
    with torch.no_grad():
        steered = model(input_ids=x).logits
        uninstall(model)
        stock = model(input_ids=x).logits
    return float(reverse_kl(steered, stock))


def test_a_large_weight_keeps_the_surfaces_near_the_stock_model(tiny, text_file, tmp_path):
    model, tok = tiny
    kw = dict(grid_size=4, grid_range=(-2, 2), layers=[1, 2], cfg=_cfg(), text=text_file, eval_text=TEXT,
              progress=False, log=None)
    train_surfaces(model, tok, tmp_path / "plain", **kw)
    free = _kl_to_stock(model, tok)
    _, res = train_surfaces(model, tok, tmp_path / "kl", kl_weight=50.0, **kw)
    held = _kl_to_stock(model, tok)
    assert free > 0 and held < 0.5 * free, (free, held)
    assert read_config(tmp_path / "kl")["meta"]["training"]["kl_weight"] == 50.0
    assert "kl_weight" not in read_config(tmp_path / "plain")["meta"]["training"]
    assert all("kl" in row for row in res.history)


@pytest.mark.parametrize("weight", [-1.0, float("nan"), float("inf")])
def test_a_bad_weight_is_refused_before_training(tiny, tmp_path, weight):
    model, tok = tiny
    with pytest.raises(GeosteerError, match="KL weight must be a finite number >= 0"):
        train_surfaces(model, tok, tmp_path / "x", cfg=_cfg(), kl_weight=weight, progress=False, log=None)
    assert not (tmp_path / "x").exists() and not (tmp_path / "x.train").exists()


def test_learn_surfaces_fluency_weight_reaches_the_run(text_file, tmp_path, monkeypatch, capsys):
    from tests.cli_helpers import run_cli

    code, _, err = run_cli(monkeypatch, capsys, "learn", "surfaces", "-m", "tiny-llama", "--out", str(tmp_path / "s"),
                           "--steps", "2", "--batch-size", "2", "--context", "24", "--grid", "4", "--layers", "1",
                           "--text", str(text_file), "--eval-tokens", "48", "--fluency-weight", "3")
    assert code == 0, err
    training = read_config(tmp_path / "s")["meta"]["training"]
    assert training["kl_weight"] == 3.0 and "--fluency-weight 3" in read_config(tmp_path / "s")["meta"]["command"]
