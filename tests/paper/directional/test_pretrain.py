"""``geosteer_paper.directional.pretrain`` (from-scratch byte-level models with the edit active) and the
``geosteer study directional pretrain`` verb (tiny settings)."""

import json
import math

import pytest
import torch

from tests.cli_helpers import run_cli


def test_pretrain_variants_train_and_differ():
    from geosteer_paper.directional.pretrain import sample_batch, train_one

    data = torch.randint(0, 256, (4000,), generator=torch.Generator().manual_seed(0))
    vals = [sample_batch(data, torch.Generator().manual_seed(1), 2, 16)]
    kw = dict(d_model=32, layers=1, heads=2, ffn=64)
    res = {v: train_one(v, 0, data, vals, steps=3, batch=2, ctx=16, lr=1e-2, eval_every=3, model_kw=kw,
                        log=lambda s: None) for v in ("baseline", "value_par")}
    assert res["baseline"]["curve"][0]["step"] == 3
    assert res["baseline"]["final_val"] != res["value_par"]["final_val"]
    # each variant equals a hand-written loop: baseline with no edit, value_par with the full aggregate's
    # parallel part removed (ComponentScale("value_full", s_par=0)) during training and evaluation
    for variant, edit in (("baseline", None), ("value_par", ("value_full", 0.0))):
        hand = _hand_trained_val(data, vals, kw, edit, steps=3, batch=2, ctx=16, lr=1e-2)
        assert res[variant]["final_val"] == pytest.approx(hand, rel=1e-5), variant


def _hand_trained_val(data, vals, kw, edit, *, steps, batch, ctx, lr, seed=0):
    """The pretraining protocol written out: AdamW (0.9, 0.95; wd 0.1), 10 % linear warmup then cosine to 0,
    gradient clip 1, the data order of ``Generator(1000 + seed)``; the mean next-byte cross-entropy on ``vals``."""
    from geosteer.directional.sites import ComponentScale
    from geosteer.interventions import steer
    from geosteer_paper.directional.pretrain import small_model

    model = small_model(ctx=ctx, seed=seed, **kw).train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(1000 + seed)
    warm = max(1, steps // 10)

    def xent(x):
        logp = torch.log_softmax(model(input_ids=x[:, :-1], use_cache=False).logits, -1)
        return -logp.gather(-1, x[:, 1:, None]).mean()

    with steer(model, *([ComponentScale(edit[0], s_par=edit[1])] if edit else [])):
        for step in range(steps):
            rate = lr * (step + 1) / warm if step < warm else \
                lr * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, steps - warm)))
            for g in opt.param_groups:
                g["lr"] = rate
            start = torch.randint(0, len(data) - ctx - 1, (batch,), generator=gen)
            loss = xent(torch.stack([data[s:s + ctx + 1] for s in start.tolist()]))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        model.eval()
        with torch.no_grad():
            return sum(xent(x).item() for x in vals) / len(vals)


def test_pretrain_val_loss_is_next_byte_cross_entropy():
    """The validation loss scores token t+1 from tokens ≤ t (a naive per-position log-softmax), and a
    periodic byte stream is learned: train and val loss both fall."""
    from geosteer_paper.directional.pretrain import mean_loss, sample_batch, small_model, train_one

    model = small_model(d_model=32, layers=1, heads=2, ffn=64, ctx=16, seed=0).eval()
    x = torch.randint(0, 256, (2, 17), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        logits = model(input_ids=x[:, :-1]).logits
    naive = sum(-torch.log_softmax(logits[b, t], -1)[x[b, t + 1]].item()
                for b in range(2) for t in range(16)) / 32
    assert mean_loss(model, [x]) == pytest.approx(naive, rel=1e-5)
    data = torch.arange(4000) % 7 + 97
    vals = [sample_batch(data, torch.Generator().manual_seed(1), 4, 16)]
    res = train_one("baseline", 0, data, vals, steps=40, batch=4, ctx=16, lr=1e-2, eval_every=20,
                    model_kw=dict(d_model=32, layers=1, heads=2, ffn=64), log=lambda s: None)
    first, last = res["curve"]
    assert last["val_loss"] < first["val_loss"] < math.log(256) and last["val_loss"] < 0.5


def test_pretrain_verb_writes_curves_and_finals(tmp_path, monkeypatch, capsys):
    out = tmp_path / "p"
    args = ["study", "directional", "pretrain", "--variants", "baseline,value_par", "--seed-list", "0", "--steps", "2",
            "--batch-size", "2", "--context", "16", "--d-model", "32", "--n-layers", "1", "--eval-every", "2",
            "--val-batches", "1", "--out-dir", str(out), "--threads", "1"]
    threads = torch.get_num_threads()
    try:
        code, _, err = run_cli(monkeypatch, capsys, *args)
        assert code == 0, err
        doc = json.loads((out / "pretrain_final.json").read_text())
        assert [(r["variant"], r["seed"]) for r in doc["rows"]] == [("baseline", 0), ("value_par", 0)]
        assert doc["meta"]["model"] == {"d_model": 32, "layers": 1, "heads": 1, "ffn": 96}
        curves = (out / "pretrain_curves.csv").read_text().splitlines()
        assert curves[0].startswith("variant,seed,step") and len(curves) == 3
        assert "note:" not in err
    finally:
        torch.set_num_threads(threads)  # --threads 1 set this process' torch threads
