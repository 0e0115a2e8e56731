"""The wall-learning loop (``geosteer manifold wall-learn``): candidates, relaxation, hardening, artifact.

Full-batch and deterministic: every step sees all target and control prompts, so a run is fixed by its
inputs and settings. State (parameters, AdamW, schedule, RNG, history, the scored candidates) is written with
the ``geosteer.train`` checkpoint helpers into ``<out>.train/`` (atomic), first right after scoring, then every
``checkpoint_every`` steps; ``resume=True`` continues from it and ends with exactly the parameters of an
uninterrupted run. ``mode="dense"`` trains all surface coefficients on the same objective instead (the dense
baseline of the study); it saves the fine-tuned surfaces. ``promote=True`` (``geosteer manifold steer-learn``)
flips the sign of the target term, dense mode only: the surfaces learn to *raise* the target continuations'
log-prob (minus the negatives' when given) under the same control-KL hinge.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path

import torch

from geosteer.errors import GeosteerError
from geosteer.manifold.wall_learn import (
    SoftWalls,
    WallLearnConfig,
    control_kl,
    control_logprobs,
    encode_controls,
    encode_targets,
    target_logprob,
)
from geosteer.manifold.wall_learn_candidates import score_candidates
from geosteer.outputs import check_output_folder
from geosteer.progress import counter


def _fingerprint(tb, cb, cfg: WallLearnConfig, layers: list[int], nb=None) -> str:
    h = hashlib.sha256()
    for t in (tb.ids, tb.target, cb.ids) + ((nb.ids, nb.target) if nb is not None else ()):
        h.update(t.numpy().tobytes())
    h.update(json.dumps({**cfg.to_dict(), "layers": layers, "steps": None, "checkpoint_every": None},
                        sort_keys=True).encode())
    return h.hexdigest()


def _bank_digest(bank) -> str:
    """SHA-256 of the surfaces a run starts from (coefficients, ranges), before any step changes them."""
    h = hashlib.sha256()
    for t in (bank.coefficients, bank.lo, bank.hi):
        h.update(t.detach().float().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()


def _forward(model, batch):
    from geosteer.models.loading import input_device

    return model(input_ids=batch.ids.to(input_device(model)), use_cache=False).logits


def objective_terms(model, tb, cb, ref_logp, nb=None) -> dict:
    """Target log-prob (n,), control KL over all positions and at the last position (scalars); with a
    negatives batch ``nb`` also their log-prob (m,)."""
    tlp = target_logprob(_forward(model, tb), tb)
    lp, valid = control_logprobs(_forward(model, cb), cb)
    terms = {"target_logprob": tlp, "kl": control_kl(ref_logp, lp, valid),
             "kl_last": control_kl(ref_logp, lp, valid, last_only=True, lengths=cb.lengths)}
    if nb is not None:
        terms["negative_logprob"] = target_logprob(_forward(model, nb), nb)
    return terms


def signed_objective(terms: dict, promote: bool) -> torch.Tensor:
    """The target term of the loss: mean target log-prob (suppress), or −(mean target log-prob − mean
    negative log-prob, when negatives are given) (promote)."""
    tlp = terms["target_logprob"].mean()
    if not promote:
        return tlp
    nlp = terms["negative_logprob"].mean() if "negative_logprob" in terms else tlp.new_zeros(())
    return -(tlp - nlp)


def learn_walls(model, tok, bank, targets: list[dict], controls: list[str], cfg: WallLearnConfig, out,
                *, resume: bool = False, overwrite: bool = False, stop_at: int | None = None,
                storage_dtype: str = "float32", command: str | None = None,
                log: Callable[[str], None] | None = print, promote: bool = False,
                negatives: list[dict] | None = None):
    """Learn walls (or, ``cfg.mode="dense"``, fine-tune the surfaces) and save the artifact at ``out``.

    ``bank``: the surfaces (loaded for ``model``, not attached); it is edited in place (walls added) and
    saved. ``stop_at``: end after that many steps as if killed (no artifact). ``promote``: raise the targets
    (and lower ``negatives``, same format) instead of suppressing them (dense mode). Returns (bank, report).
    """
    from geosteer.interventions import steer
    from geosteer.manifold.artifact import save
    from geosteer.models.anatomy import anatomy
    from geosteer.train import TrainConfig
    from geosteer.train.checkpoint import (
        check_compatible,
        check_run,
        find_checkpoint,
        load_checkpoint,
        run_record,
        save_checkpoint,
    )
    from geosteer.train.schedule import make_scheduler

    say = log or (lambda s: None)
    cfg.validate()
    if not targets:
        raise GeosteerError("the target prompt set is empty")
    if not controls:
        raise GeosteerError("the control prompt set is empty")
    if promote and cfg.mode != "dense":
        raise GeosteerError(f"steering towards the targets trains the surfaces (mode dense); walls only "
                            f"suppress (got mode {cfg.mode!r})")
    if negatives is not None and not promote:
        raise GeosteerError("negative continuations go with promote=True (steer-learn)")
    out = Path(out)
    check_output_folder(out, "geosteer-surfaces", what="--out")  # never over a folder of the user's files
    layers = anatomy(model).check_layers(cfg.layers if cfg.layers is not None else bank.layers)
    tb, cb = encode_targets(tok, targets), encode_controls(tok, controls)
    nb = encode_targets(tok, negatives) if negatives else None
    state_dir = Path(str(out) + ".train")
    ckpt_path = state_dir / "checkpoint.safetensors"
    found = find_checkpoint(state_dir) if state_dir.is_dir() else None
    if found is not None and not resume and not overwrite:
        raise GeosteerError(f"{found} already exists; resume it (--resume) or pass --overwrite")
    fp = _fingerprint(tb, cb, cfg, layers, nb)
    steer_fields = {"objective": "promote", "negatives": len(negatives or [])} if promote else {}
    run = run_record(model, mode=cfg.mode, layers=layers, surfaces=_bank_digest(bank), **steer_fields)
    tcfg = TrainConfig(lr=cfg.lr, steps=cfg.steps, batch_size=1, seq_len=1, warmup_steps=0, min_lr_ratio=1.0,
                       grad_clip=None, seed=cfg.seed, checkpoint_every=cfg.checkpoint_every,
                       eval_before_after=False)
    state = load_checkpoint(found) if resume and found is not None else None
    if state is not None:
        check_run(state, run, found)  # before any model pass, and before its candidates are used
    t0 = time.perf_counter()
    bank.coefficients.requires_grad_(False)  # walls mode: the surfaces stay as they are
    with torch.no_grad(), steer(model, bank):
        ref_logp, _ = control_logprobs(_forward(model, cb), cb)
        ref_target = target_logprob(_forward(model, tb), tb)
        ref_negative = target_logprob(_forward(model, nb), nb) if nb is not None else None
    cands = None
    if cfg.mode == "walls":
        cands = state["extra"]["candidates"] if state is not None else \
            score_candidates(model, tok, bank, tb, cb, cfg, layers)
        soft = SoftWalls(cands, bank=bank, temperature=cfg.temperature(0))
        with torch.no_grad():
            soft.gate.fill_(cfg.gate_init)
        params = {n: p for n, p in soft.named_parameters()}
        trainable = [soft, bank]
    else:
        soft = None
        bank.coefficients.requires_grad_(True)
        params = {"coefficients": bank.coefficients}
        trainable = [bank]
    torch.manual_seed(cfg.seed)
    opt = torch.optim.AdamW(list(params.values()), lr=cfg.lr, weight_decay=0.0)
    sched = make_scheduler(opt, tcfg)
    history: list[dict] = []
    start = 0
    extra = {"candidates": cands, "layers": layers, "mode": cfg.mode}
    if state is not None:
        from geosteer.train.loop import _restore_state

        check_compatible(state, tcfg, params, fp, found, run=run)
        _restore_state(state, params, opt, sched, found)
        history, start = list(state["history"]), int(state["step"])
        say(f"resumed from {found} at step {start}/{cfg.steps}")

    def checkpoint(step: int) -> None:
        save_checkpoint(ckpt_path, step=step, params=params, optimizer=opt, scheduler=sched, cfg=tcfg,
                        history=history, data_fingerprint=fp, extra=extra, run=run)

    if state is None:
        checkpoint(0)  # the scored candidates survive a kill during the first steps
    say(f"{cfg.mode}: {len(cands) if cands else bank.n_parameters()} "
        f"{'candidate channels' if cands else 'coefficients'}, {cfg.steps} steps")
    stopped = False
    t_loop = time.perf_counter()
    try:
        with steer(model, *trainable):
            for step in range(start, cfg.steps):
                if stop_at is not None and step >= stop_at:
                    stopped = True
                    break
                if soft is not None:
                    soft.temperature = cfg.temperature(step)
                t_step = time.perf_counter()
                opt.zero_grad(set_to_none=True)
                with torch.enable_grad():
                    terms = objective_terms(model, tb, cb, ref_logp, nb)
                    tlp = terms["target_logprob"].mean()
                    # both the next-token KL after each prompt and the KL over all its positions stay under τ
                    penalty = cfg.kl_weight * (torch.relu(terms["kl_last"] - cfg.kl_threshold)
                                               + torch.relu(terms["kl"] - cfg.kl_threshold))
                    sparse = cfg.sparsity * soft.gates().sum() if soft is not None else tlp.new_zeros(())
                    loss = signed_objective(terms, promote) + penalty + sparse
                    loss.backward()
                if not torch.isfinite(loss.detach()):
                    raise GeosteerError(f"wall learning diverged at step {step + 1} (loss {float(loss)}); "
                                        f"try a lower lr (now {cfg.lr:g})")
                opt.step()
                sched.step()
                rec = {"step": step + 1, "seconds": round(time.perf_counter() - t_step, 2),
                       "loss": float(loss.detach()), "target_logprob": float(tlp.detach()),
                       "kl": float(terms["kl"].detach()), "kl_last": float(terms["kl_last"].detach())}
                if nb is not None:
                    rec["negative_logprob"] = float(terms["negative_logprob"].detach().mean())
                if soft is not None:
                    g = soft.gates().detach()
                    rec.update(temperature=soft.temperature, gates_open=int((g > 0.5).sum()),
                               gate_sum=float(g.sum()))
                history.append(rec)
                say(f"[{counter(step + 1, cfg.steps, time.perf_counter() - t_loop, start)}] "
                    + " ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in rec.items()))
                if step + 1 == cfg.steps or (cfg.checkpoint_every and (step + 1) % cfg.checkpoint_every == 0):
                    checkpoint(step + 1)
    finally:
        bank.coefficients.requires_grad_(False)
    if stopped:
        say(f"stopped after step {len(history)}/{cfg.steps}; resume with --resume")
        return bank, {"stopped": True, "steps_done": len(history)}
    report = {"mode": cfg.mode, "config": cfg.to_dict(), "layers": layers, "history": history,
              "reference": {"target_logprob": float(ref_target.mean())}, "candidates": cands,
              "seconds_this_run": round(time.perf_counter() - t0, 1)}
    if soft is not None:
        walls = soft.harden()
        report["regions"] = [w.to_dict() for w in walls]
        report["regions_text"] = [w.describe() for w in walls]
        report["gates"] = soft.gates().detach().tolist()
        report["boxes"] = torch.stack([soft.q_lo, soft.q_hi, soft.k_lo, soft.k_hi], 1).detach().tolist()
        if not walls:
            say("no gate ended above 0.5: the artifact gets no walls (lower --sparsity or raise --kl-threshold)")
        bank.add_walls(walls)
        bank.history.append({"edit": "wall-learn: " + ("; ".join(report["regions_text"]) or "no regions"),
                             "surfaces": len(walls), "coefficients": 0})
    elif promote:
        bank.history.append({"edit": "steer-learn: surfaces fine-tuned to promote the target continuations"
                                     + (" over the negatives" if nb is not None else ""),
                             "surfaces": bank.n_parameters() // bank.K ** 2,
                             "coefficients": bank.n_parameters()})
    else:
        bank.history.append({"edit": "wall-learn dense: surfaces fine-tuned on the target/control objective",
                             "surfaces": bank.n_parameters() // bank.K ** 2,
                             "coefficients": bank.n_parameters()})
    with torch.no_grad(), steer(model, bank):  # what ships: the bank with its exact walls
        hard = objective_terms(model, tb, cb, ref_logp, nb)
    report["train_eval"] = {"target_logprob": float(hard["target_logprob"].mean()),
                            "target_drop": float((ref_target - hard["target_logprob"]).mean()),
                            "kl": float(hard["kl"]), "kl_last": float(hard["kl_last"])}
    te = report["train_eval"]
    if promote:
        te["target_gain"] = -te.pop("target_drop")
        if nb is not None:
            te["negative_logprob"] = float(hard["negative_logprob"].mean())
            te["negative_drop"] = float((ref_negative - hard["negative_logprob"]).mean())
        say(f"result on the training prompts: target log-prob gain {te['target_gain']:.4g}, control KL "
            f"{te['kl']:.4g} (last token {te['kl_last']:.4g})")
    else:
        say(f"hard result on the training prompts: target log-prob drop {te['target_drop']:.4g}, control KL "
            f"{te['kl']:.4g} (last token {te['kl_last']:.4g})")
    if command:
        report["command"] = command
        if bank.meta.get("command"):  # the card shows this run's command; the surfaces' own stays recorded
            bank.meta["surfaces_command"] = bank.meta["command"]
        bank.meta["command"] = command
    record = {k: v for k, v in report.items() if k != "history"}
    save(bank, out, dtype=storage_dtype, **({"steer_learn": record} if promote else {"wall_learn": record}))
    from geosteer.io_utils import atomic_write_json

    atomic_write_json(state_dir / "history.json", {"history": history, "config": cfg.to_dict()})
    say(f"saved {out}")
    return bank, report
