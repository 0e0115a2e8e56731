"""``train_surfaces`` on tiny models: training, calibration, artifact contents, kill + resume."""

from __future__ import annotations

import json

import pytest
import torch

from geosteer.errors import GeosteerError
from geosteer.interventions import steer
from geosteer.manifold import load, read_config, uninstall
from geosteer.manifold.train import calibrate_ranges, parse_layers, train_surfaces
from geosteer.record import AttentionRecorder
from geosteer.train import TrainConfig
from tests.manifold.conftest import TEXT


def _cfg(**kw):
    d = dict(lr=5e-2, steps=6, batch_size=2, seq_len=24, checkpoint_every=2, log_every=100,
             eval_context=48, eval_stride=24, eval_tokens=96)
    d.update(kw)
    return TrainConfig(**d)


def test_train_saves_artifact_that_reproduces_the_trained_model(tiny, text_file, tmp_path):
    model, tok = tiny
    out = tmp_path / "surf"
    bank, res = train_surfaces(model, tok, out, grid_size=4, grid_range=(-2, 2), layers=[1, 2], cfg=_cfg(),
                               text=text_file, eval_text=TEXT, progress=False, log=None, command="test cmd")
    try:
        assert res.steps_done == 6 and bank.coefficients.abs().sum() > 0
        assert res.ppl_after < res.ppl_before  # trained on the same text it is scored on
        doc = read_config(out)
        tr = doc["meta"]["training"]
        assert tr["tokens"] == 6 * 2 * 24 and tr["heldout"]["ppl_before"] == res.ppl_before
        assert doc["meta"]["command"] == "test cmd" and doc["layers"] == [1, 2] and doc["grid_size"] == 4
        assert tr["parameter_overhead"]["surface_params"] == 2 * 4 * 16 * 7 * 7  # L, H, d, K, K
        x = tok(TEXT[:200], return_tensors="pt").input_ids
        with torch.no_grad():
            trained = model(input_ids=x).logits
        uninstall(model)
        with torch.no_grad():
            stock = model(input_ids=x).logits
            with steer(model, load(out, model=model)):
                reloaded = model(input_ids=x).logits
        assert not torch.allclose(trained, stock)
        torch.testing.assert_close(reloaded, trained, rtol=0, atol=1e-5)
        hist = json.loads((tmp_path / "surf.train" / "history.json").read_text())
        assert [r["step"] for r in hist["rows"]] == list(range(1, 7))
    finally:
        uninstall(model)


def test_kill_and_resume_gives_same_surfaces(tiny, text_file, tmp_path):
    model, tok = tiny
    kw = dict(grid_size=4, grid_range=(-2, 2), layers=[0], text=text_file, progress=False, log=None)
    cfg = _cfg(eval_before_after=False)
    full, _ = train_surfaces(model, tok, tmp_path / "full", cfg=cfg, **kw)
    ref = full.coefficients.detach().clone()
    uninstall(model)
    _, r1 = train_surfaces(model, tok, tmp_path / "cut", cfg=cfg, stop_at=3, **kw)  # checkpoint at 2
    assert r1.stopped_early and not (tmp_path / "cut").exists()
    uninstall(model)
    resumed, r2 = train_surfaces(model, tok, tmp_path / "cut", cfg=cfg, resume=True, **kw)
    uninstall(model)
    assert r2.resumed_from == 2
    assert torch.equal(resumed.coefficients.detach(), ref)
    with pytest.raises(GeosteerError, match="grid"):
        train_surfaces(model, tok, tmp_path / "cut", cfg=cfg, resume=True, **{**kw, "grid_size": 5})
    uninstall(model)


def test_resume_refuses_another_model_range_or_calibration(tiny, tiny_model, text_file, tmp_path):
    """The checkpoint records its run: another base model (same shapes or not), another --range or --calibrate
    is refused naming the field, and the checkpoint's settings never replace this run's."""
    model, tok = tiny
    kw = dict(grid_size=4, grid_range=(-2, 2), layers=[0], text=text_file, progress=False, log=None)
    cfg = _cfg(eval_before_after=False)
    train_surfaces(model, tok, tmp_path / "cut", cfg=cfg, stop_at=2, **kw)
    uninstall(model)
    ckpt = tmp_path / "cut.train" / "checkpoint.safetensors"
    before = ckpt.read_bytes()
    other, other_tok = tiny_model("qwen3")
    cases = [((model, tok), {"grid_range": (-3, 3)}, r"grid_range: checkpoint \[-2.0, 2.0\], now \[-3.0, 3.0\]"),
             ((model, tok), {"calibrate": True}, "calibrate: checkpoint False, now True"),
             ((other, other_tok), {}, "base_model: checkpoint 'tiny-qwen2', now 'tiny-qwen3'")]
    for (m, t), change, match in cases:
        with pytest.raises(GeosteerError, match=match) as ei:
            train_surfaces(m, t, tmp_path / "cut", cfg=cfg, resume=True, **{**kw, **change})
        uninstall(m)
        assert len(str(ei.value).splitlines()) == 1
    assert ckpt.read_bytes() == before and not (tmp_path / "cut").exists()


def test_calibrated_ranges_match_recorded_quantiles(tiny, text_file):
    """Independent check: the range is the quantile of |q|,|k| recorded with a plain AttentionRecorder."""
    model, tok = tiny
    ranges = calibrate_ranges(model, tok, [0, 2], text=text_file, batches=1, batch_size=2, seq_len=24,
                              quantile=0.9)
    from geosteer.train.data import BatchOrder, load_texts, token_stream, windows

    w = windows(token_stream(tok, load_texts(text_file)), 24, tok.bos_token_id)
    x = w[BatchOrder(w.shape[0], 2, 0).indices(0)]
    rec = AttentionRecorder(layers=[0, 2], what=("query", "key"))
    with steer(model, rec), torch.no_grad():
        model(input_ids=x)
    for (lo, hi), layer in zip(ranges, [0, 2], strict=True):
        vals = torch.cat([rec[("query", layer)][0][:, :, 1:].abs().flatten(),
                          rec[("key", layer)][0][:, :, 1:].abs().flatten()])
        expect = torch.quantile(vals, 0.9).item()
        assert lo == -hi and hi == pytest.approx(expect, abs=1e-4)


def test_parse_layers():
    assert parse_layers("8-10,2", 30) == [2, 8, 9, 10]
    assert parse_layers("all", 30) is None
    with pytest.raises(GeosteerError, match="0..29"):
        parse_layers("28-31", 30)
    with pytest.raises(GeosteerError, match="bad layer spec"):
        parse_layers("x-2", 30)


def test_train_surfaces_refuses_a_folder_of_user_files_before_training(tiny_model, tmp_path):
    from geosteer.errors import OutputRefused
    from geosteer.manifold.train import train_surfaces

    model, tok = tiny_model("llama")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "thesis.txt").write_text("precious")
    with pytest.raises(OutputRefused, match="thesis.txt"):
        train_surfaces(model, tok, victim, log=None, progress=False)
    assert [p.name for p in tmp_path.iterdir()] == ["victim"]  # no <out>.train/ either: refused before any step
    assert [p.name for p in victim.iterdir()] == ["thesis.txt"] and (victim / "thesis.txt").read_text() == "precious"


@pytest.mark.parametrize("args,needle", [
    (["--grid", "1000000000"], "'--grid'"),
    (["--context", "100000"], "--context 100000 is longer than the model's 512 positions"),  # RoPE: ran silently
    (["--resume", "--overwrite"], "--resume and --overwrite contradict each other"),
    (["--layers", "5-7"], "layer 5 out of range"),
    (["--text", "EMPTY"], "--text file is empty"),
    (["--text", "LATIN1"], "as UTF-8 text"),
    (["--rank", "0"], "--rank must be an integer from 1 to 10 for grid 8"),
    (["--rank", "11"], "--rank must be an integer from 1 to 10 for grid 8"),
    (["--fluency-weight", "-1"], "--fluency-weight must be a finite number >= 0, got -1.0"),
    (["--fluency-weight", "nan"], "--fluency-weight must be a finite number"),
])
def test_train_cli_refuses_before_any_weights_are_built(monkeypatch, capsys, tmp_path, args, needle):
    from tests.cli_helpers import refused_before_load

    monkeypatch.chdir(tmp_path)
    (tmp_path / "EMPTY").write_text(" \n\n")
    (tmp_path / "LATIN1").write_bytes("café\n".encode("latin-1"))
    err = refused_before_load(monkeypatch, capsys, "learn", "surfaces", "-m", "tiny-llama", "--out", "o",
                              "--steps", "1", *args)
    assert needle in err and sorted(p.name for p in tmp_path.iterdir()) == ["EMPTY", "LATIN1"]


def test_train_refuses_windows_past_the_positions(tiny, tmp_path):
    model, tok = tiny
    limit = model.config.max_position_embeddings
    ids = torch.randint(0, 1000, (2, limit + 1))
    with pytest.raises(GeosteerError, match=rf"training window \(seq_len\) {limit + 1} is longer than the model's"):
        train_surfaces(model, tok, tmp_path / "s", grid_size=2, layers=[0], cfg=_cfg(steps=1, seq_len=limit + 1),
                       train_ids=ids, progress=False, log=None)
    uninstall(model)
    assert not (tmp_path / "s").exists()
