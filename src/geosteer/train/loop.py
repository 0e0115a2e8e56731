"""One training loop for any trainable intervention on a frozen model.

``fit(model, trainable, cfg, data, loss=...)`` optimises the parameters of ``trainable`` that require grad
on ``loss(model, batch) -> (scalar, {name: logged number})`` (:mod:`geosteer.train.objective`) over ``data``
(:mod:`geosteer.train.data`) with AdamW, a schedule (:mod:`geosteer.train.schedule`) and clipping, through
``accelerate`` (one CPU process or many GPUs; gradients averaged). Four steps: :func:`set_up`,
:func:`train_step`, :func:`evaluate`, :func:`checkpoint`. Seeded; a resumed run ends with the parameters
of an uninterrupted one; a non-finite loss raises :class:`TrainingDiverged`. ``train`` is the language-model front.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from geosteer.data.corpus import split_text
from geosteer.errors import DiskFull, GeosteerError
from geosteer.eval.perplexity import strided_perplexity
from geosteer.interventions import steer
from geosteer.models.limits import check_positions
from geosteer.progress import counter
from geosteer.progress import enabled as bars_enabled
from geosteer.train.checkpoint import (
    CHECKPOINT_NAME,
    check_compatible,
    find_checkpoint,
    load_checkpoint,
    restore_state,
    run_record,
    save_checkpoint,
)
from geosteer.train.config import RunConfig, TrainConfig
from geosteer.train.data import WindowBatches, prepare_windows
from geosteer.train.objective import LossFn, lm_loss
from geosteer.train.result import TrainingDiverged, TrainResult
from geosteer.train.schedule import make_scheduler


def trainable_parameters(trainable: nn.Module) -> dict[str, nn.Parameter]:
    params = {n: p for n, p in trainable.named_parameters() if p.requires_grad}
    if not params:
        raise GeosteerError(f"{type(trainable).__name__} has no parameters that require grad: "
                            "nothing to train")
    return params


def _check_frozen(model: nn.Module, params: dict[str, nn.Parameter]) -> None:
    ours = {id(p) for p in params.values()}
    loose = [n for n, p in model.named_parameters() if p.requires_grad and id(p) not in ours]
    if loose:
        raise GeosteerError(f"the base model has {len(loose)} trainable parameters outside the intervention "
                            f"(e.g. {loose[0]}); freeze it with model.requires_grad_(False)")


def heldout_perplexity(model: nn.Module, tok, cfg: TrainConfig, text: str | None = None,
                       progress: bool = False) -> dict:
    """Strided held-out perplexity (``cfg.eval_context``/``eval_stride``, capped at ``cfg.eval_tokens``)."""

    if text is None:
        text = split_text("heldout")
    was_training = model.training
    model.eval()
    with torch.no_grad():
        r = strided_perplexity(model, tok, text, context=cfg.eval_context, stride=cfg.eval_stride,
                               batch_size=cfg.eval_batch, max_tokens=cfg.eval_tokens, progress=progress)
    model.train(was_training)
    return {"ppl": float(r.ppl), "nll": float(r.nll), "tokens": int(r.tokens)}


@dataclass
class Run:
    """Everything one training run holds between its steps (built by :func:`set_up`)."""

    model: nn.Module
    cfg: TrainConfig
    data: Any  # WindowBatches | FullBatch: batch(step, rank, world, device), chunks(batch, micro_batch)
    loss: LossFn
    options: RunConfig
    acc: Any  # accelerate.Accelerator
    params: dict[str, nn.Parameter]
    opt: torch.optim.Optimizer
    sched: Any
    record: dict
    ckpt_path: Path | None
    evaluator: Callable[[nn.Module], dict] | None = None
    tracking: bool = False
    sharded: bool = False
    history: list[dict] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    start: int = 0
    resumed_from: int | None = None
    last_good: int | None = None

    @property
    def main(self) -> bool:
        return self.acc.is_main_process

    @property
    def total(self) -> int:
        return self.cfg.total_steps


def _accelerator(cfg: TrainConfig, options: RunConfig) -> tuple[Any, bool]:
    """The run's accelerator (the given one, or a new one with the config's trackers) and whether it tracks."""
    from accelerate import Accelerator

    acc = options.accelerator
    # trackers: cfg.log_with, or those of a given accelerator (e.g. custom accelerate GeneralTrackers)
    tracking = bool(cfg.log_with) or bool(getattr(acc, "log_with", None))
    log_dir = None
    if cfg.log_with:
        from geosteer.train.tracking import require_trackers, tracker_dir

        require_trackers(cfg.log_with)
        if acc is not None and not acc.log_with:
            raise GeosteerError("cfg.log_with needs the trackers on the accelerator: build it with "
                                "Accelerator(log_with=..., project_dir=...) or do not pass one")
        log_dir = tracker_dir(cfg.log_with, cfg.log_dir, options.out_dir)
    if acc is None:
        acc = Accelerator(mixed_precision=cfg.mixed_precision, log_with=list(cfg.log_with) if tracking else None,
                          project_dir=log_dir if tracking else None)
    return acc, tracking


def set_up(model: nn.Module, trainable: nn.Module, cfg: TrainConfig, data, loss: LossFn = lm_loss,
           options: RunConfig | None = None, evaluator: Callable[[nn.Module], dict] | None = None) -> Run:
    """Check the model is frozen, place it, build AdamW and the schedule, and resume from a checkpoint."""
    options = options or RunConfig()
    params = trainable_parameters(trainable)
    _check_frozen(model, params)
    acc, tracking = _accelerator(cfg, options)
    if cfg.batch_size % acc.num_processes:
        raise GeosteerError(f"batch_size {cfg.batch_size} is not divisible by the {acc.num_processes} processes")
    if options.move_model:
        model.to(acc.device)
        trainable.to(acc.device)
    sharded = bool(cfg.fsdp) and acc.num_processes > 1
    if sharded:
        from geosteer.integrations.distributed import shard_frozen_model

        shard_frozen_model(model, acc)
    torch.manual_seed(cfg.seed)
    opt = torch.optim.AdamW(list(params.values()), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    out = options.out_dir
    run = Run(model=model, cfg=cfg, data=data, loss=loss, options=options, acc=acc, params=params, opt=opt,
              sched=make_scheduler(opt, cfg), record=run_record(model, **(options.record or {})),
              ckpt_path=Path(out) / CHECKPOINT_NAME if out is not None else None, evaluator=evaluator,
              tracking=tracking, sharded=sharded)
    _resume(run)
    return run


def _resume(run: Run) -> None:
    """Refuse to write over an existing checkpoint unless told; with ``resume``, continue from it exactly."""
    o = run.options
    found = find_checkpoint(o.out_dir) if o.out_dir is not None else None
    if found is not None and not o.resume and not o.overwrite:
        raise GeosteerError(f"{found} already exists; resume it (--resume) or choose another "
                            "output folder")
    if not o.resume:
        return
    if run.ckpt_path is None:
        raise GeosteerError("resume needs the output folder that holds the checkpoint")
    if found is None:
        o.say(f"nothing to resume at {run.ckpt_path}; starting from step 0")
        return
    state = load_checkpoint(found)
    check_compatible(state, run.cfg, run.params, run.data.fingerprint, found, run=run.record)
    restore_state(state, run.params, run.opt, run.sched, found)
    run.history = list(state["history"])
    run.evals = list(state["extra"].get("evals", []))
    run.start = run.resumed_from = run.last_good = int(state["step"])
    o.say(f"resumed from {found} at step {run.start}/{run.total}")


def evaluate(run: Run, step: int) -> None:
    """Held-out evaluation at ``step`` (recorded, logged, sent to the trackers)."""
    if not run.main and not run.sharded:  # a sharded model needs every process in each forward
        return
    r = run.evaluator(run.model)
    if not run.main:
        return
    run.evals.append({"step": step, **r})
    if run.tracking:
        run.acc.log({"heldout_ppl": r["ppl"], "heldout_nll": r["nll"]}, step=step)
    run.options.say(f"step {step}/{run.total}: held-out ppl {r['ppl']:.4f} ({r['tokens']} tokens)")


def checkpoint(run: Run, step: int) -> None:
    """Write the run's state at ``step`` (main process; atomic) and wait for every process."""
    if run.ckpt_path is not None and run.main:
        try:
            save_checkpoint(run.ckpt_path, step=step, params=run.params, optimizer=run.opt, scheduler=run.sched,
                            cfg=run.cfg, history=run.history, data_fingerprint=run.data.fingerprint,
                            extra={"evals": run.evals, **(run.options.checkpoint_extra or {})}, run=run.record)
        except DiskFull as e:
            with contextlib.suppress(OSError):
                run.ckpt_path.parent.rmdir()  # the state folder this write created, if nothing else is in it
            kept = (f"; the checkpoint of step {run.last_good} is kept (--resume continues from it)"
                    if run.last_good is not None else "")
            raise DiskFull(f"checkpoint of step {step}: {e}{kept}") from None
        run.last_good = step
    run.acc.wait_for_everyone()


def _backward(run: Run, step: int) -> tuple[torch.Tensor, dict[str, float]]:
    """Loss and gradients of step ``step`` over this process' micro-batches (weighted by their share)."""
    acc = run.acc
    batch = run.data.batch(step, acc.process_index, acc.num_processes, acc.device)
    loss_sum, logged = None, {}
    with torch.enable_grad():
        for chunk, share in run.data.chunks(batch, run.cfg.micro_batch):
            with acc.autocast():
                loss, numbers = run.loss(run.model, chunk)
            part = loss * share
            acc.backward(part)
            loss_sum = part.detach() if loss_sum is None else loss_sum + part.detach()
            for k, v in numbers.items():
                logged[k] = logged.get(k, 0.0) + v * share
    if acc.num_processes > 1:
        loss_sum = acc.reduce(loss_sum, "mean")
        for p in run.params.values():
            if p.grad is not None:
                p.grad = acc.reduce(p.grad, "mean")
        if logged:
            means = acc.reduce(torch.tensor(list(logged.values()), device=acc.device), "mean")
            logged = dict(zip(logged, means.tolist(), strict=True))
    return loss_sum, logged


def train_step(run: Run, step: int) -> dict:
    """One optimizer step (0-based ``step``): loss, gradients, clipping, divergence check; its record."""
    t0 = time.perf_counter()
    cfg, params = run.cfg, run.params
    run.opt.zero_grad(set_to_none=True)
    loss_sum, logged = _backward(run, step)
    loss_val = float(loss_sum)
    grads = [p.grad for p in params.values() if p.grad is not None]
    if cfg.grad_clip is not None:
        gnorm = float(torch.nn.utils.clip_grad_norm_(list(params.values()), cfg.grad_clip))
    else:
        gnorm = float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))) if grads else 0.0
    if not (math.isfinite(loss_val) and math.isfinite(gnorm)):
        what = "loss" if not math.isfinite(loss_val) else "gradient norm"
        kept = (f"the last good checkpoint (step {run.last_good}) is kept at {run.ckpt_path}"
                if run.last_good is not None else "no checkpoint had been written yet")
        raise TrainingDiverged(f"training stopped at step {step + 1}: {what} is "
                               f"{loss_val if what == 'loss' else gnorm}; {kept}. Try a lower lr (now {cfg.lr:g})")
    lr_now = run.sched.get_last_lr()[0]
    run.opt.step()
    run.sched.step()
    per_step = run.data.tokens_per_step
    rec = {"step": step + 1, "loss": loss_val, **logged, "lr": lr_now, "grad_norm": gnorm,
           "tokens": (step + 1) * per_step, "tokens_per_s": per_step / (time.perf_counter() - t0)}
    if run.options.after_step is not None:
        rec.update(run.options.after_step())
    return rec


_STANDARD = ("step", "loss", "lr", "grad_norm", "tokens", "tokens_per_s")


def _after_step(run: Run, step: int, rec: dict, t_run: float, bar, do_eval: bool) -> None:
    """Record, log, evaluate and checkpoint after step ``step`` as the config says; then the callback."""
    cfg, done = run.cfg, step + 1
    run.history.append(rec)
    if run.tracking:
        run.acc.log({k: v for k, v in rec.items() if k != "step" and isinstance(v, (int, float))}, step=done)
    if bar is not None:
        bar.update(1)
        bar.set_postfix(loss=f"{rec['loss']:.4f}", tok_s=f"{rec['tokens_per_s']:.0f}")
    if run.main and (done % cfg.log_every == 0 or done == run.total):
        more = "".join(f" {k} {v:.4g}" if isinstance(v, float) else f" {k} {v}"
                       for k, v in rec.items() if k not in _STANDARD)
        run.options.say(f"step {counter(done, run.total, time.perf_counter() - t_run, run.start)} "
                        f"loss {rec['loss']:.4f}{more} lr {rec['lr']:.3g} grad {rec['grad_norm']:.3g} "
                        f"tok/s {rec['tokens_per_s']:.0f}")
    if do_eval and cfg.eval_every and done % cfg.eval_every == 0 and done != run.total:
        evaluate(run, done)
    if done == run.total:
        if do_eval and cfg.eval_before_after:
            evaluate(run, run.total)
        checkpoint(run, done)
    elif cfg.checkpoint_every and done % cfg.checkpoint_every == 0:
        checkpoint(run, done)
    if run.options.callback is not None:
        run.options.callback(done, rec)


def expected_duration(first_step_s: float, steps_left: int) -> str:
    """``"about 4.2 min"``: ``steps_left`` steps at the first step's time (an estimate)."""
    left = max(0.0, first_step_s) * max(0, steps_left)
    return f"about {left:.0f} s" if left < 120 else (f"about {left / 60:.1f} min" if left < 7200
                                                      else f"about {left / 3600:.1f} h")


def _say_expected(run: Run, first_step_s: float) -> None:
    """After the first step of a run: how long the whole run should take (an estimate, said once)."""
    steps = run.total - run.start
    if run.main and steps > 1:
        run.options.say(f"expected duration: {expected_duration(first_step_s, steps)} for {steps} steps "
                        f"(an estimate: the first step took {first_step_s:.2f} s; evaluations and checkpoints "
                        "add to it)")


def _progress_bar(run: Run):
    if not (run.options.progress and run.main and bars_enabled()):  # the one progress policy
        return None
    from tqdm.auto import tqdm

    return tqdm(total=run.total, initial=run.start, desc="train", unit="step", dynamic_ncols=True, file=sys.stderr)


def fit(model: nn.Module, trainable: nn.Module, cfg: TrainConfig, data, *, loss: LossFn = lm_loss,
        options: RunConfig | None = None, evaluator: Callable[[nn.Module], dict] | None = None) -> TrainResult:
    """Train ``trainable``'s parameters on ``loss`` over ``data``; return a :class:`TrainResult`.

    ``data``: :class:`geosteer.train.data.WindowBatches` or :class:`geosteer.train.data.FullBatch` (anything
    with ``fingerprint``, ``tokens_per_step``, ``batch(step, rank, world, device)`` and ``chunks(batch,
    micro_batch)``). ``evaluator(model) -> {"ppl", "nll", "tokens"}`` runs before (unless
    ``options.eval_before`` is off) and after the run and every ``cfg.eval_every`` steps."""

    run = set_up(model, trainable, cfg, data, loss, options, evaluator)
    o = run.options
    do_eval = evaluator is not None and (cfg.eval_before_after or cfg.eval_every > 0)
    if o.checkpoint_at_start and run.resumed_from is None:
        checkpoint(run, 0)
    t_run = time.perf_counter()
    stopped, bar = False, None
    if run.tracking:
        from geosteer.train.tracking import tracker_config

        name = Path(o.out_dir).name if o.out_dir is not None else "geosteer-train"
        run.acc.init_trackers(name, config=tracker_config(cfg.to_dict()))
    with steer(model, *o.interventions):
        if (do_eval and o.eval_before and run.start == 0 and cfg.eval_before_after
                and not any(e["step"] == 0 for e in run.evals)):
            evaluate(run, 0)
        bar = _progress_bar(run)
        try:
            for step in range(run.start, run.total):
                if o.stop_at is not None and step >= o.stop_at:
                    stopped = True
                    break
                t_step = time.perf_counter()
                rec = train_step(run, step)
                if step == run.start:
                    _say_expected(run, time.perf_counter() - t_step)
                _after_step(run, step, rec, t_run, bar, do_eval)
        finally:
            if bar is not None:
                bar.close()
            if run.tracking:
                run.acc.end_training()
    done = run.history[-1]["step"] if run.history else run.start
    return TrainResult(steps_done=done, total_steps=run.total, tokens_seen=done * data.tokens_per_step,
                       seconds=time.perf_counter() - t_run, resumed_from=run.resumed_from, stopped_early=stopped,
                       history=run.history, evals=run.evals,
                       checkpoint=str(run.ckpt_path) if run.ckpt_path else None)


def train(model: nn.Module, trainable: nn.Module, cfg: TrainConfig, *, tok=None, text: str | Path | None = "train",
          train_ids: torch.Tensor | None = None, eval_text: str | None = None, loss: LossFn = lm_loss,
          options: RunConfig | None = None, **run_options) -> TrainResult:
    """Train ``trainable``'s parameters on token windows (default loss: next-token cross-entropy).

    ``text``: a corpus split or text file (or ``train_ids``); held-out perplexity before, after and every
    ``cfg.eval_every`` steps when a tokenizer is given. ``options`` (:class:`geosteer.train.RunConfig`) or its
    fields as keywords drive the run; a resume must match the checkpoint's run record.
    """
    if options is not None and run_options:
        raise TypeError("give the run options as options=RunConfig(...) or as keywords, not both")
    if "run" in run_options:
        run_options["record"] = run_options.pop("run")
    options = options or RunConfig(**run_options)
    _check_frozen(model, trainable_parameters(trainable))  # before any text is read
    data = prepare_windows(tok, text, train_ids, cfg.seq_len)
    check_positions(model, data.shape[1], "training window (seq_len)")
    evaluator = (lambda m: heldout_perplexity(m, tok, cfg, eval_text)) if tok is not None else None
    return fit(model, trainable, cfg, WindowBatches(data, cfg.batch_size, cfg.seed), loss=loss, options=options,
               evaluator=evaluator)
