"""One training loop for any trainable intervention on a frozen model.

``train(model, trainable, cfg)`` optimises the parameters of ``trainable`` that require grad (an
``nn.Module`` that acts inside ``model``'s forward: an attached SurfaceBank, FFN gates, a PEFT-wrapped
model) with next-token cross-entropy, AdamW, a learning-rate schedule (:mod:`geosteer.train.schedule`; default
linear warmup + cosine decay) and gradient clipping. The base
model must be frozen (the loop refuses to run otherwise). It runs through HF ``accelerate`` so that the
same code trains on one CPU process or many GPUs/nodes (launch with ``accelerate launch``): each process
takes an equal share of every global batch and the gradients are averaged before the step.

Runs are reproducible from ``cfg.seed``; a checkpoint every ``cfg.checkpoint_every`` steps (atomic)
lets ``resume=True`` continue after a kill with nothing lost but the steps since that checkpoint, and the
resumed run ends with the same parameters as an uninterrupted one. A non-finite loss or gradient stops
the run with :class:`TrainingDiverged`; the last good checkpoint is left untouched. ``cfg.log_with`` sends
the per-step records to experiment trackers through accelerate (:mod:`geosteer.train.tracking`).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from geosteer.errors import GeosteerError
from geosteer.models.limits import check_positions
from geosteer.progress import counter
from geosteer.progress import enabled as bars_enabled
from geosteer.train.checkpoint import (
    CHECKPOINT_NAME,
    check_compatible,
    find_checkpoint,
    load_checkpoint,
    run_record,
    save_checkpoint,
)
from geosteer.train.config import TrainConfig
from geosteer.train.data import BatchOrder, fingerprint, load_texts, token_stream, windows
from geosteer.train.schedule import make_scheduler


class TrainingDiverged(GeosteerError):
    """The loss or the gradient became NaN/inf; the run stopped and kept its last good checkpoint."""


@dataclass
class TrainResult:
    steps_done: int
    total_steps: int
    tokens_seen: int
    seconds: float
    resumed_from: int | None
    stopped_early: bool
    history: list[dict] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    checkpoint: str | None = None

    @property
    def ppl_before(self) -> float | None:
        return next((e["ppl"] for e in self.evals if e["step"] == 0), None)

    @property
    def ppl_after(self) -> float | None:
        done = [e for e in self.evals if e["step"] == self.total_steps]
        return done[-1]["ppl"] if done else None

    @property
    def final_loss(self) -> float | None:
        return self.history[-1]["loss"] if self.history else None

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(ppl_before=self.ppl_before, ppl_after=self.ppl_after, final_loss=self.final_loss)
        return d


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
    from geosteer.data.corpus import split_text
    from geosteer.eval.perplexity import strided_perplexity

    if text is None:
        text = split_text("heldout")
    was_training = model.training
    model.eval()
    with torch.no_grad():
        r = strided_perplexity(model, tok, text, context=cfg.eval_context, stride=cfg.eval_stride,
                               batch_size=cfg.eval_batch, max_tokens=cfg.eval_tokens, progress=progress)
    model.train(was_training)
    return {"ppl": float(r.ppl), "nll": float(r.nll), "tokens": int(r.tokens)}


def _restore_state(state: dict, params: dict[str, nn.Parameter], opt, sched, path: Path) -> None:
    """Load a validated checkpoint's parameters, optimizer, schedule and RNG (one-line error if they do not fit)."""
    shapes = [tuple(p.shape) for p in params.values()]
    for idx, st in state["optimizer"]["state"].items():
        if not isinstance(idx, int) or not 0 <= idx < len(shapes) or not isinstance(st, dict):
            raise GeosteerError(f"cannot resume {path}: its optimizer state names parameter {idx!r}, "
                                f"valid 0..{len(shapes) - 1}")
        for key, t in st.items():
            if isinstance(t, torch.Tensor) and t.dim() > 0 and tuple(t.shape) != shapes[idx]:
                raise GeosteerError(f"cannot resume {path}: optimizer state {key} of parameter {idx} has "
                                    f"shape {tuple(t.shape)}, expected {shapes[idx]}")
    try:
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"])
    except (ValueError, KeyError, TypeError, RuntimeError) as e:
        raise GeosteerError(f"cannot resume {path}: its optimizer/schedule/RNG state does not fit this run "
                            f"({type(e).__name__})") from None
    with torch.no_grad():
        for k, p in params.items():
            p.copy_(state["params"][k].to(p.device, p.dtype))


def _prepare_windows(tok, text, train_ids: torch.Tensor | None, cfg: TrainConfig) -> torch.Tensor:
    if train_ids is not None:
        if train_ids.dim() == 2:
            return train_ids.long()
        bos = getattr(tok, "bos_token_id", None) if tok is not None else None
        return windows(train_ids.long(), cfg.seq_len, bos)
    if tok is None:
        raise GeosteerError("train() needs a tokenizer (tok=...) or pre-tokenised train_ids")
    texts = load_texts(text)
    return windows(token_stream(tok, texts), cfg.seq_len, getattr(tok, "bos_token_id", None))


def train(
    model: nn.Module,
    trainable: nn.Module,
    cfg: TrainConfig,
    *,
    tok=None,
    text: str | Path | None = "train",
    train_ids: torch.Tensor | None = None,
    eval_text: str | None = None,
    out_dir: str | Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    interventions: Sequence = (),
    progress: bool = True,
    log: Callable[[str], None] | None = print,
    callback: Callable[[int, dict], None] | None = None,
    stop_at: int | None = None,
    accelerator=None,
    checkpoint_extra: dict | None = None,
    run: dict | None = None,
    eval_before: bool = True,
) -> TrainResult:
    """Train ``trainable``'s parameters on next-token cross-entropy; return a :class:`TrainResult`.

    ``text``: a corpus split name or a text file (ignored when ``train_ids`` are given: a 1-D token stream
    or 2-D ready windows). ``interventions`` are attached (``geosteer.steer``) for the run, e.g. when the
    trainable module is an intervention that is not attached yet; already attached modules need nothing.
    ``stop_at``: end after that many steps (as if killed there; resume later). ``callback(step, record)``
    runs after every step. Held-out perplexity (``eval_text`` or the corpus' held-out split) is measured
    before (unless ``eval_before=False``, e.g. when the stock number is known) and after the run and every
    ``cfg.eval_every`` steps, when a tokenizer is given. Checkpoints record the base model id and ``run``
    (the caller's layout and options); resuming refuses a checkpoint whose record differs.
    """
    from accelerate import Accelerator

    from geosteer.interventions import steer

    say = log if log is not None else (lambda s: None)
    params = trainable_parameters(trainable)
    _check_frozen(model, params)
    # trackers: cfg.log_with, or those of a given accelerator (e.g. custom accelerate GeneralTrackers)
    tracking = bool(cfg.log_with) or bool(getattr(accelerator, "log_with", None))
    if cfg.log_with:
        from geosteer.train.tracking import require_trackers, tracker_dir

        require_trackers(cfg.log_with)
        if accelerator is not None and not accelerator.log_with:
            raise GeosteerError("cfg.log_with needs the trackers on the accelerator: build it with "
                                "Accelerator(log_with=..., project_dir=...) or do not pass one")
        log_dir = tracker_dir(cfg.log_with, cfg.log_dir, out_dir)
    acc = accelerator or Accelerator(mixed_precision=cfg.mixed_precision,
                                     log_with=list(cfg.log_with) if tracking else None,
                                     project_dir=log_dir if tracking else None)
    world, rank = acc.num_processes, acc.process_index
    if cfg.batch_size % world:
        raise GeosteerError(f"batch_size {cfg.batch_size} is not divisible by the {world} processes")
    main = acc.is_main_process
    model.to(acc.device)
    trainable.to(acc.device)
    sharded = bool(cfg.fsdp) and world > 1
    if sharded:
        from geosteer.integrations.distributed import shard_frozen_model

        shard_frozen_model(model, acc)

    data = _prepare_windows(tok, text, train_ids, cfg)
    check_positions(model, data.shape[1], "training window (seq_len)")
    fp = fingerprint(data)
    order = BatchOrder(data.shape[0], cfg.batch_size, cfg.seed)
    total = cfg.total_steps
    tokens_per_step = cfg.batch_size * (data.shape[1] - 1)

    torch.manual_seed(cfg.seed)
    opt = torch.optim.AdamW(list(params.values()), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    sched = make_scheduler(opt, cfg)

    ckpt_path = Path(out_dir) / CHECKPOINT_NAME if out_dir is not None else None
    record = run_record(model, **(run or {}))
    history: list[dict] = []
    evals: list[dict] = []
    start, resumed_from, last_good = 0, None, None
    found = find_checkpoint(out_dir) if out_dir is not None else None
    if found is not None and not resume and not overwrite:
        raise GeosteerError(f"{found} already exists; resume it (--resume) or choose another "
                            "output folder")
    if resume:
        if ckpt_path is None:
            raise GeosteerError("resume needs the output folder that holds the checkpoint")
        if found is not None:
            state = load_checkpoint(found)
            check_compatible(state, cfg, params, fp, found, run=record)
            _restore_state(state, params, opt, sched, found)
            history = list(state["history"])
            evals = list(state["extra"].get("evals", []))
            start = resumed_from = last_good = int(state["step"])
            say(f"resumed from {found} at step {start}/{total}")
        else:
            say(f"nothing to resume at {ckpt_path}; starting from step 0")

    do_eval = tok is not None and (cfg.eval_before_after or cfg.eval_every > 0)
    eval_source = eval_text

    def evaluate(step: int) -> None:
        if not main and not sharded:  # a sharded model needs every process in each forward
            return
        r = heldout_perplexity(model, tok, cfg, eval_source)
        if not main:
            return
        evals.append({"step": step, **r})
        if tracking:
            acc.log({"heldout_ppl": r["ppl"], "heldout_nll": r["nll"]}, step=step)
        say(f"step {step}/{total}: held-out ppl {r['ppl']:.4f} ({r['tokens']} tokens)")

    def checkpoint(step: int) -> None:
        nonlocal last_good
        if ckpt_path is not None and main:
            save_checkpoint(ckpt_path, step=step, params=params, optimizer=opt, scheduler=sched, cfg=cfg,
                            history=history, data_fingerprint=fp,
                            extra={"evals": evals, **(checkpoint_extra or {})}, run=record)
            last_good = step
        acc.wait_for_everyone()

    t_run = time.perf_counter()
    stopped = False
    bar = None
    if tracking:
        from geosteer.train.tracking import tracker_config

        name = Path(out_dir).name if out_dir is not None else "geosteer-train"
        acc.init_trackers(name, config=tracker_config(cfg.to_dict()))
    with steer(model, *interventions):
        if (do_eval and eval_before and start == 0 and cfg.eval_before_after
                and not any(e["step"] == 0 for e in evals)):
            evaluate(0)
        if progress and main and bars_enabled():  # the one progress policy: a terminal, not --json
            from tqdm.auto import tqdm

            bar = tqdm(total=total, initial=start, desc="train", unit="step", dynamic_ncols=True, file=sys.stderr)
        try:
            for step in range(start, total):
                if stop_at is not None and step >= stop_at:
                    stopped = True
                    break
                t0 = time.perf_counter()
                x = data[order.shard(step, rank, world)].to(acc.device)
                opt.zero_grad(set_to_none=True)
                loss_sum = torch.zeros((), device=acc.device)
                for chunk in x.split(cfg.micro_batch or x.shape[0]):
                    with acc.autocast():
                        logits = model(input_ids=chunk).logits
                    loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), chunk[:, 1:].flatten())
                    part = loss * (chunk.shape[0] / x.shape[0])
                    acc.backward(part)
                    loss_sum += part.detach()
                if world > 1:
                    loss_sum = acc.reduce(loss_sum, "mean")
                    for p in params.values():
                        if p.grad is not None:
                            p.grad = acc.reduce(p.grad, "mean")
                loss_val = float(loss_sum)
                grads = [p.grad for p in params.values() if p.grad is not None]
                if cfg.grad_clip is not None:
                    gnorm = float(torch.nn.utils.clip_grad_norm_(list(params.values()), cfg.grad_clip))
                else:
                    gnorm = float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))) if grads \
                        else 0.0
                if not (math.isfinite(loss_val) and math.isfinite(gnorm)):
                    what = "loss" if not math.isfinite(loss_val) else "gradient norm"
                    kept = (f"the last good checkpoint (step {last_good}) is kept at {ckpt_path}"
                            if last_good is not None else "no checkpoint had been written yet")
                    raise TrainingDiverged(f"training stopped at step {step + 1}: {what} is "
                                           f"{loss_val if what == 'loss' else gnorm}; {kept}. Try a lower lr "
                                           f"(now {cfg.lr:g})")
                lr_now = sched.get_last_lr()[0]
                opt.step()
                sched.step()
                dt = time.perf_counter() - t0
                rec = {"step": step + 1, "loss": loss_val, "lr": lr_now, "grad_norm": gnorm,
                       "tokens": (step + 1) * tokens_per_step, "tokens_per_s": tokens_per_step / dt}
                history.append(rec)
                if tracking:
                    acc.log({k: rec[k] for k in ("loss", "lr", "grad_norm", "tokens", "tokens_per_s")},
                            step=step + 1)
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(loss=f"{loss_val:.4f}", tok_s=f"{rec['tokens_per_s']:.0f}")
                if main and ((step + 1) % cfg.log_every == 0 or step + 1 == total):
                    say(f"step {counter(step + 1, total, time.perf_counter() - t_run, start)} "
                        f"loss {loss_val:.4f} lr {lr_now:.3g} grad {gnorm:.3g} tok/s {rec['tokens_per_s']:.0f}")
                if do_eval and cfg.eval_every and (step + 1) % cfg.eval_every == 0 and step + 1 != total:
                    evaluate(step + 1)
                if step + 1 == total:
                    if do_eval and cfg.eval_before_after:
                        evaluate(total)
                    checkpoint(step + 1)
                elif cfg.checkpoint_every and (step + 1) % cfg.checkpoint_every == 0:
                    checkpoint(step + 1)
                if callback is not None:
                    callback(step + 1, rec)
        finally:
            if bar is not None:
                bar.close()
            if tracking:
                acc.end_training()
    done = history[-1]["step"] if history else start
    return TrainResult(steps_done=done, total_steps=total, tokens_seen=done * tokens_per_step,
                       seconds=time.perf_counter() - t_run, resumed_from=resumed_from, stopped_early=stopped,
                       history=history, evals=evals, checkpoint=str(ckpt_path) if ckpt_path else None)
