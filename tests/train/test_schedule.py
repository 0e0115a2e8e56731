"""Learning-rate schedules (geosteer.train.schedule) and experiment trackers (geosteer.train.tracking).

The default schedule must give exactly (bit for bit) the lr of geosteer's original formula at every step,
and a checkpoint written with the original ``LambdaLR(opt, cfg.lr_factor)`` must resume exactly: long runs
are resumed across this change. ``linear``/``constant`` must be transformers' own schedules.
"""

from __future__ import annotations

import math

import pytest
import torch

from geosteer.errors import GeosteerError
from geosteer.train import TrainConfig, train
from geosteer.train.checkpoint import CHECKPOINT_NAME, load_checkpoint
from geosteer.train.schedule import make_scheduler
from tests.train.helpers import LearnedBias, train_bias, train_config


class OriginalSchedule:
    """geosteer's schedule as written before make_scheduler existed (TrainConfig.lr_factor, commit 43a84cf),
    kept here as the independent reference; used as a bound method, as the original loop did."""

    def __init__(self, warmup: int, total: int, min_lr_ratio: float):
        self.w, self.n, self.r = warmup, total, min_lr_ratio

    def lr_factor(self, step: int) -> float:
        w, n = self.w, self.n
        if step < w:
            return (step + 1) / w
        if n <= w:
            return 1.0
        progress = min(1.0, (step - w) / max(1, n - w - 1))
        return self.r + (1 - self.r) * 0.5 * (1 + math.cos(math.pi * progress))


def _lrs(sched, opt, steps: int) -> list[float]:
    out = []
    for _ in range(steps):
        out.append(sched.get_last_lr()[0])
        assert opt.param_groups[0]["lr"] == out[-1]
        opt.step()
        sched.step()
    return out


def _opt(lr: float):
    return torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=lr)


CONFIGS = [dict(lr=2e-2, steps=100, warmup_steps=10), dict(lr=0.003, tokens=262_144),  # the paper runs' shape
           dict(lr=0.05, tokens=262_144, seq_len=128, batch_size=8), dict(lr=1.0, steps=1),
           dict(lr=1.0, steps=1, warmup_steps=0), dict(lr=0.1, steps=7, warmup_steps=0, min_lr_ratio=0.0),
           dict(lr=0.1, steps=5, warmup_steps=5), dict(lr=0.1, steps=5, warmup_steps=9),
           dict(lr=0.1, steps=6, warmup_steps=5), dict(lr=0.3, steps=33, min_lr_ratio=1.0),
           dict(lr=1e-3, steps=1000, warmup_steps=1, min_lr_ratio=0.25)]


@pytest.mark.parametrize("kw", CONFIGS)
def test_default_schedule_is_the_original_formula_bit_for_bit(kw):
    cfg = TrainConfig(**kw)
    ref = OriginalSchedule(cfg.total_warmup, cfg.total_steps, cfg.min_lr_ratio)
    n = cfg.total_steps + 2  # and past the end (the state a finished run's checkpoint stores)
    o1, o2 = _opt(cfg.lr), _opt(cfg.lr)
    new = _lrs(make_scheduler(o1, cfg), o1, n)
    old = _lrs(torch.optim.lr_scheduler.LambdaLR(o2, ref.lr_factor), o2, n)
    assert new == old  # exact float equality at every step
    assert [cfg.lr_factor(s) for s in range(n)] == [ref.lr_factor(s) for s in range(n)]


@pytest.mark.parametrize("kw", [dict(lr=0.05, tokens=262_144), dict(lr=0.1, steps=9, warmup_steps=0)])
def test_original_scheduler_state_loads_into_make_scheduler(kw):
    """A scheduler state saved mid-run by the original code (bound-method LambdaLR, through the checkpoint's
    JSON) loaded into make_scheduler continues with exactly the original lrs."""
    import json

    cfg = TrainConfig(**kw)
    ref = OriginalSchedule(cfg.total_warmup, cfg.total_steps, cfg.min_lr_ratio)
    o_old = _opt(cfg.lr)
    s_old = torch.optim.lr_scheduler.LambdaLR(o_old, ref.lr_factor)
    cut = cfg.total_steps // 2
    _lrs(s_old, o_old, cut)
    state = json.loads(json.dumps(s_old.state_dict()))
    o_new = _opt(cfg.lr)
    s_new = make_scheduler(o_new, cfg)
    s_new.load_state_dict(state)
    o_new.param_groups[0]["lr"] = s_new.get_last_lr()[0]  # what loading the optimizer's state restores
    rest = cfg.total_steps - cut + 1
    assert _lrs(s_new, o_new, rest) == _lrs(s_old, o_old, rest)


def test_checkpoint_of_the_original_schedule_resumes_exactly(tiny, stream, tmp_path, monkeypatch):
    """Train 8 steps with the original scheduler, stop at 5 (last checkpoint: step 3), resume with make_scheduler:
    same parameters and lr history as an uninterrupted run with either scheduler."""
    import geosteer.train.loop as loop

    def run(cfg, **kw):
        return train_bias(tiny, stream, cfg, **kw)

    def original(opt, cfg):
        ref = OriginalSchedule(cfg.total_warmup, cfg.total_steps, cfg.min_lr_ratio)
        return torch.optim.lr_scheduler.LambdaLR(opt, ref.lr_factor)

    cfg = train_config(warmup_steps=2)
    with monkeypatch.context() as m:
        m.setattr(loop, "make_scheduler", original)
        full_old, res_old = run(cfg)
        run(cfg, out_dir=tmp_path / "cut", stop_at=5)
    # as geosteer wrote it before the schedule option: no "schedule" in the signature or the config
    (tmp_path / "old").mkdir()
    _rewrite_without_schedule(tmp_path / "cut" / CHECKPOINT_NAME, tmp_path / "old" / CHECKPOINT_NAME)
    state = load_checkpoint(tmp_path / "old" / CHECKPOINT_NAME)
    assert state["step"] == 3 and "schedule" not in state["signature"]  # checkpoints every 3 steps
    assert state["scheduler"]["lr_lambdas"] == [{}]  # what the bound-method LambdaLR stored
    resumed, res = run(cfg, out_dir=tmp_path / "old", resume=True)
    full_new, res_new = run(cfg)
    assert res.resumed_from == 3
    assert torch.equal(resumed.vec, full_old.vec) and torch.equal(full_new.vec, full_old.vec)
    assert [r["lr"] for r in res.history] == [r["lr"] for r in res_old.history] == \
        [r["lr"] for r in res_new.history]


def _rewrite_without_schedule(src, dst) -> None:
    """Copy a checkpoint with the "schedule" key removed from its resume signature (a checkpoint written before
    the option existed; its checksum recomputed, as that writer would have)."""
    import json

    from safetensors import safe_open
    from safetensors.torch import save_file

    from geosteer.train.checkpoint import state_digest

    with safe_open(str(src), framework="pt") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    doc = json.loads(meta["geosteer"])
    del doc["signature"]["schedule"]
    del doc["config"]["schedule"], doc["config"]["log_with"], doc["config"]["log_dir"]
    text = json.dumps(doc)
    save_file(tensors, str(dst), metadata={**meta, "geosteer": text, "sha256": state_digest(text, tensors)})


def test_other_schedule_refuses_resume_of_a_cosine_checkpoint(tiny, stream, tmp_path):
    model, tok = tiny
    bias = LearnedBias(model.config.hidden_size)
    train(model, bias, train_config(), tok=tok, train_ids=stream, interventions=[bias], progress=False, log=None,
          out_dir=tmp_path, stop_at=3)
    with pytest.raises(GeosteerError, match="schedule: checkpoint 'cosine', now 'linear'"):
        train(model, bias, train_config(schedule="linear", min_lr_ratio=0.1), tok=tok, train_ids=stream,
              interventions=[bias], progress=False, log=None, out_dir=tmp_path, resume=True)


@pytest.mark.parametrize("name", ["linear", "constant"])
@pytest.mark.parametrize("kw", [dict(steps=20, warmup_steps=4), dict(steps=5, warmup_steps=0), dict(steps=1)])
def test_linear_and_constant_are_transformers_schedules(name, kw):
    from transformers import get_scheduler

    cfg = TrainConfig(lr=0.5, schedule=name, **kw)
    o1, o2 = _opt(cfg.lr), _opt(cfg.lr)
    hf = get_scheduler("linear" if name == "linear" else "constant_with_warmup", o2,
                       num_warmup_steps=cfg.total_warmup, num_training_steps=cfg.total_steps)
    n = cfg.total_steps + 1
    ours = _lrs(make_scheduler(o1, cfg), o1, n)
    assert ours == _lrs(hf, o2, n)
    w = cfg.total_warmup
    n_d = max(1, cfg.total_steps - w)
    expect = [(s / w if s < w else (1.0 if name == "constant" else max(0.0, (cfg.total_steps - s) / n_d)))
              for s in range(n)]
    assert ours == pytest.approx([cfg.lr * e for e in expect], rel=1e-12, abs=1e-15)


def test_schedule_and_tracker_validation():
    with pytest.raises(ValueError, match="schedule must be one of cosine, linear, constant"):
        TrainConfig(steps=3, schedule="exp")
    with pytest.raises(ValueError, match="min_lr_ratio applies to the cosine schedule only"):
        TrainConfig(steps=3, schedule="linear", min_lr_ratio=0.0)
    with pytest.raises(ValueError, match="unknown tracker 'tensorbord'"):
        TrainConfig(steps=3, log_with="tensorbord")
    cfg = TrainConfig(steps=3, log_with="tensorboard, wandb", schedule="constant")
    assert cfg.log_with == ("tensorboard", "wandb")
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg


# ---- experiment trackers ---------------------------------------------------------------------------------
def _train(tiny, stream, cfg, **kw):
    return train_bias(tiny, stream, cfg, **kw)[1]


def test_tensorboard_tracker_logs_the_run_history(tiny, stream, tmp_path):
    pytest.importorskip("tensorboard")
    import numpy as np
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    res = _train(tiny, stream, train_config(log_with="tensorboard"), out_dir=out)
    ea = EventAccumulator(str(out / "logs" / "run"))
    ea.Reload()
    for key in ("loss", "lr", "grad_norm"):
        got = [(e.step, e.value) for e in ea.Scalars(key)]
        want = [(r["step"], float(np.float32(r[key]))) for r in res.history]  # TensorBoard stores float32
        assert got == want, key


def test_trackers_of_a_given_accelerator_get_every_record(tiny, stream, tmp_path):
    from accelerate import Accelerator
    from accelerate.tracking import GeneralTracker

    class Recorder(GeneralTracker):
        name = "recorder"
        requires_logging_directory = False

        def __init__(self):
            super().__init__()
            self.logged, self.config, self.finished = [], None, False

        @property
        def tracker(self):
            return self

        def store_init_configuration(self, values):
            self.config = values

        def log(self, values, step=None, **kw):
            self.logged.append((step, dict(values)))

        def finish(self):
            self.finished = True

    rec = Recorder()
    acc = Accelerator(cpu=True, log_with=[rec])
    res = _train(tiny, stream, train_config(), accelerator=acc)
    steps = [(s, v) for s, v in rec.logged if "loss" in v]
    assert [s for s, _ in steps] == [r["step"] for r in res.history] == list(range(1, 9))
    assert [v["loss"] for _, v in steps] == [r["loss"] for r in res.history]  # exact: the same floats
    assert [v["lr"] for _, v in steps] == [r["lr"] for r in res.history]
    assert rec.finished and rec.config["schedule"] == "cosine" and rec.config["betas"] == "0.9,0.999"
    assert rec.config["lr"] == 5e-2 and rec.config["steps"] == 8


def test_missing_tracker_package_is_one_line(tiny, stream, tmp_path, monkeypatch, capsys):
    import geosteer.extras as extras
    from tests.cli_helpers import one_line_exit_2, run_cli

    real = extras.available
    monkeypatch.setattr(extras, "available", lambda m: False if m in ("tensorboard", "tensorboardX") else real(m))
    with pytest.raises(extras.MissingDependency, match=r"needs the package 'tensorboard'.*geosteer\[track\]"):
        _train(tiny, stream, train_config(log_with="tensorboard"), out_dir=tmp_path / "a")
    assert not (tmp_path / "a").exists()
    code, _, err = run_cli(monkeypatch, capsys, "learn", "surfaces", "--out", str(tmp_path / "b"), "--model",
                           "tiny-llama", "--steps", "1", "--log-with", "tensorboard")
    one_line_exit_2(code, err)
    assert "geosteer[track]" in err and not (tmp_path / "b").exists() and not (tmp_path / "b.train").exists()
    code, _, err = run_cli(monkeypatch, capsys, "learn", "surfaces", "--out", str(tmp_path / "c"), "--model",
                           "tiny-llama", "--steps", "1", "--schedule", "exp")
    one_line_exit_2(code, err)
    assert "schedule must be one of" in err


def test_file_tracker_needs_a_folder(tiny, stream):
    pytest.importorskip("tensorboard")
    with pytest.raises(GeosteerError, match="writes files: give an output folder"):
        _train(tiny, stream, train_config(log_with="tensorboard"))
