"""The generic training loop on a tiny model with a small trainable intervention."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from geosteer import load_model
from geosteer.errors import GeosteerError
from geosteer.interventions import steer
from geosteer.train import BatchOrder, TrainConfig, TrainingDiverged, train, windows
from geosteer.train.checkpoint import CHECKPOINT_NAME, load_checkpoint
from tests.train.helpers import LearnedBias, train_bias, train_config


@pytest.fixture(scope="module")
def full(tiny, stream):
    """The uninterrupted reference run (8 steps, seed 0)."""
    return train_bias(tiny, stream, train_config())


def test_loss_falls(tiny, stream):
    bias, res = train_bias(tiny, stream, train_config(steps=16, lr=0.1))
    first = sum(r["loss"] for r in res.history[:3]) / 3
    last = sum(r["loss"] for r in res.history[-3:]) / 3
    assert last < first - 0.05
    assert res.tokens_seen == 16 * 4 * 16
    assert bias.vec.abs().sum() > 0


def test_first_loss_matches_hf_loss(tiny, stream, full):
    """The loop's loss equals HF's own shifted CE (labels=...) on the first batch, at the initial params."""
    model, tok = tiny
    cfg = train_config()
    _, res = full
    w = windows(stream, cfg.seq_len, tok.bos_token_id)
    x = w[BatchOrder(w.shape[0], cfg.batch_size, cfg.seed).indices(0)]
    with torch.no_grad():
        ref = model(input_ids=x, labels=x).loss.item()  # zero bias == stock model
    assert math.isclose(res.history[0]["loss"], ref, rel_tol=1e-5)


def test_reproducible_and_seed_matters(tiny, stream, full):
    a, _ = full
    b, _ = train_bias(tiny, stream, train_config())
    c, _ = train_bias(tiny, stream, train_config(seed=1, steps=2))
    d, _ = train_bias(tiny, stream, train_config(steps=2))
    assert torch.equal(a.vec, b.vec)
    assert not torch.equal(c.vec, d.vec)


def test_kill_and_resume_equals_uninterrupted(tiny, stream, tmp_path, full):

    def kill_at_5(step, rec):
        if step == 5:
            raise KeyboardInterrupt  # as if the process were killed after step 5 (checkpoint is at 3)

    with pytest.raises(KeyboardInterrupt):
        train_bias(tiny, stream, train_config(), out_dir=tmp_path / "cut", callback=kill_at_5)
    assert load_checkpoint(tmp_path / "cut" / CHECKPOINT_NAME)["step"] == 3
    resumed, res = train_bias(tiny, stream, train_config(), out_dir=tmp_path / "cut", resume=True)
    assert res.resumed_from == 3
    assert torch.equal(resumed.vec, full[0].vec)
    assert [r["step"] for r in res.history] == list(range(1, 9))


def test_stop_at_then_resume(tiny, stream, tmp_path, full):
    _, r1 = train_bias(tiny, stream, train_config(), out_dir=tmp_path, stop_at=6)
    assert r1.stopped_early and r1.steps_done == 6
    resumed, _ = train_bias(tiny, stream, train_config(), out_dir=tmp_path, resume=True)
    assert torch.equal(resumed.vec, full[0].vec)


def test_resume_refuses_other_settings(tiny, stream, tmp_path):
    train_bias(tiny, stream, train_config(), out_dir=tmp_path, stop_at=3)
    assert load_checkpoint(tmp_path / CHECKPOINT_NAME)["step"] == 3
    with pytest.raises(GeosteerError, match="lr"):
        train_bias(tiny, stream, train_config(lr=1e-3), out_dir=tmp_path, resume=True)
    with pytest.raises(GeosteerError, match="already exists"):
        train_bias(tiny, stream, train_config(), out_dir=tmp_path)


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tiny, stream, tmp_path):
    model, tok = tiny
    bias = LearnedBias(model.config.hidden_size, poison_after=4)  # forward 5 (step 5) returns NaN
    with pytest.raises(TrainingDiverged, match=r"step 5: loss is nan.*step 3"):
        train(model, bias, train_config(), tok=tok, train_ids=stream, interventions=[bias], out_dir=tmp_path,
              progress=False, log=None)
    state = load_checkpoint(tmp_path / CHECKPOINT_NAME)
    assert state["step"] == 3
    assert torch.isfinite(state["params"]["vec"]).all()


def test_refuses_unfrozen_base_and_empty_trainable(tiny, stream):
    model, tok = tiny
    with pytest.raises(GeosteerError, match="nothing to train"):
        train(model, nn.Module(), train_config(), train_ids=stream, progress=False, log=None)
    bias = LearnedBias(model.config.hidden_size)
    model.lm_head.weight.requires_grad_(True)
    try:
        with pytest.raises(GeosteerError, match="outside the intervention"):
            train(model, bias, train_config(), train_ids=stream, progress=False, log=None)
    finally:
        model.requires_grad_(False)


def test_micro_batches_match_full_batch(tiny, stream):
    a, _ = train_bias(tiny, stream, train_config(steps=3))
    b, _ = train_bias(tiny, stream, train_config(steps=3, micro_batch=2))
    torch.testing.assert_close(a.vec, b.vec, rtol=1e-4, atol=1e-6)


def test_heldout_eval_before_after(stream):
    from geosteer.eval.perplexity import strided_perplexity

    model, tok = tiny = load_model("tiny-llama")
    text = "The river flows through the valley. " * 30
    cfg = train_config(steps=4, eval_before_after=True, eval_every=2, eval_context=48, eval_stride=24, eval_tokens=96)
    bias, res = train_bias(tiny, stream, cfg, eval_text=text)
    assert [e["step"] for e in res.evals] == [0, 2, 4]
    stock = strided_perplexity(model, tok, text, context=48, stride=24, max_tokens=96)
    assert math.isclose(res.ppl_before, stock.ppl, rel_tol=1e-6)
    with steer(model, bias):
        after = strided_perplexity(model, tok, text, context=48, stride=24, max_tokens=96)
    assert math.isclose(res.ppl_after, after.ppl, rel_tol=1e-6)


def test_explicit_single_process_accelerator(tiny, stream):
    from accelerate import Accelerator

    acc = Accelerator(cpu=True)
    assert acc.num_processes == 1
    a, _ = train_bias(tiny, stream, train_config(steps=2), accelerator=acc)
    b, _ = train_bias(tiny, stream, train_config(steps=2))
    assert torch.equal(a.vec, b.vec)


def test_schedule_warmup_then_cosine():
    cfg = TrainConfig(lr=1.0, steps=100, warmup_steps=10, min_lr_ratio=0.1)
    f = [cfg.lr_factor(s) for s in range(100)]
    assert f[:10] == pytest.approx([(s + 1) / 10 for s in range(10)])
    assert f[10] == pytest.approx(1.0) and f[99] == pytest.approx(0.1)
    # halfway through the decay (step 10 + 89/2) the cosine factor is the mean of 1 and min_lr_ratio
    assert (cfg.lr_factor(54) + cfg.lr_factor(55)) / 2 == pytest.approx(0.55, abs=1e-3)
    assert all(a >= b for a, b in zip(f[10:], f[11:], strict=False))


def test_batch_order_covers_each_epoch_and_shards():
    o = BatchOrder(10, 4, seed=3)
    seen = torch.cat([o.indices(s) for s in range(5)])  # 20 = two epochs
    assert sorted(seen[:10].tolist()) == list(range(10)) and sorted(seen[10:].tolist()) == list(range(10))
    assert torch.equal(torch.cat([o.shard(2, r, 2) for r in range(2)]), o.indices(2))


def test_config_validation():
    with pytest.raises(ValueError, match="steps or tokens"):
        TrainConfig()
    with pytest.raises(ValueError, match="lr"):
        TrainConfig(lr=-1, steps=1)
    assert TrainConfig(tokens=1000, batch_size=2, seq_len=100).total_steps == 5
    assert TrainConfig.from_dict(TrainConfig(steps=3).to_dict()) == TrainConfig(steps=3)


@pytest.mark.parametrize("first,left,want", [(1.5, 3, "about 4 s"), (2.0, 100, "about 3.3 min"),
                                             (10.0, 1000, "about 2.8 h"), (0.0, 5, "about 0 s")])
def test_expected_duration_is_the_first_step_times_the_steps(first, left, want):
    from geosteer.train.loop import expected_duration

    assert expected_duration(first, left) == want


def test_the_expected_duration_is_said_once_after_the_first_step(tiny, stream, tmp_path):
    model, tok = tiny
    lines: list[str] = []
    bias = LearnedBias(model.config.hidden_size)
    train(model, bias, train_config(steps=4, log_every=1), tok=tok, train_ids=stream, interventions=[bias],
          progress=False, log=lines.append)
    said = [i for i, ln in enumerate(lines) if ln.startswith("expected duration: about ")]
    assert len(said) == 1 and "for 4 steps" in lines[said[0]] and "an estimate" in lines[said[0]]
    assert lines[said[0] + 1].startswith("step 1/4")  # before the first step's log line, after the step
    resumed: list[str] = []  # a resumed run estimates the steps it has left
    for kw in (dict(stop_at=1), dict(resume=True)):
        b = LearnedBias(model.config.hidden_size)
        train(model, b, train_config(steps=4, checkpoint_every=1), tok=tok, train_ids=stream, interventions=[b],
              progress=False, log=resumed.append, out_dir=tmp_path, **kw)
    assert sum("for 3 steps" in ln for ln in resumed) == 1, resumed
