"""The wall-learning loop (``geosteer learn walls``): candidates, relaxation, hardening, artifact.

Full-batch and deterministic, in ``geosteer.train.fit`` with :class:`geosteer.train.PromptObjective`; its
checkpoint (``<out>.train/``) resumes to exactly an uninterrupted run. ``mode="dense"`` fine-tunes all
coefficients instead; ``promote=True`` (``learn steering-surfaces``) raises the target log-prob.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from geosteer.errors import GeosteerError
from geosteer.interventions import steer
from geosteer.io_utils import atomic_write_json
from geosteer.manifold.artifact import save
from geosteer.manifold.wall_learn import (
    SoftWalls,
    WallLearnConfig,
    control_logprobs,
    encode_controls,
    encode_targets,
    target_logprob,
)
from geosteer.manifold.wall_learn_candidates import score_candidates
from geosteer.models.anatomy import anatomy
from geosteer.outputs import check_output_folder
from geosteer.train import FullBatch, RunConfig, TrainConfig, fit
from geosteer.train.checkpoint import check_run, find_checkpoint, load_checkpoint, run_record
from geosteer.train.objective import PromptObjective, PromptSets, forward_logits, objective_terms
from geosteer.train.prompts import bos_first


def _fingerprint(tb, cb, cfg: WallLearnConfig, layers: list[int], nb=None) -> str:
    h = hashlib.sha256()
    for t in (tb.ids, tb.target, cb.ids) + ((nb.ids, nb.target) if nb is not None else ()):
        h.update(t.numpy().tobytes())
    # add_bos: the encoded ids above carry it (None and True give the same ids for a tokenizer that adds BOS)
    h.update(json.dumps({**cfg.to_dict(), "layers": layers, "steps": None, "checkpoint_every": None, "add_bos": None},
                        sort_keys=True).encode())
    return h.hexdigest()


def _bank_digest(bank) -> str:
    """SHA-256 of the surfaces a run starts from (coefficients, ranges), before any step changes them."""
    h = hashlib.sha256()
    for t in (bank.coefficients, bank.lo, bank.hi):
        h.update(t.detach().float().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()


@dataclass
class _Trainables:
    """What a run trains: the soft walls outside the surfaces (walls mode), or the surfaces (dense mode)."""

    soft: SoftWalls | None
    module: torch.nn.Module
    interventions: tuple
    candidates: list[dict] | None


def _check_inputs(targets: list[dict], controls: list[str], cfg: WallLearnConfig, promote: bool,
                  negatives: list[dict] | None) -> None:
    cfg.validate()
    if not targets:
        raise GeosteerError("the target prompt set is empty")
    if not controls:
        raise GeosteerError("the control prompt set is empty")
    if promote and cfg.mode != "dense":
        raise GeosteerError(f"steering towards the targets trains the surfaces (mode dense); walls only "
                            f"suppress (got mode {cfg.mode!r})")
    if negatives is not None and not promote:
        raise GeosteerError("negative continuations go with promote=True (learn steering-surfaces)")


def _references(model, bank, sets: PromptSets) -> dict:
    """The starting surfaces' control log-probs and target (negative) log-probs, before any step."""

    with torch.no_grad(), steer(model, bank):
        ref = {"controls": control_logprobs(forward_logits(model, sets.controls), sets.controls)[0],
               "target": target_logprob(forward_logits(model, sets.targets), sets.targets)}
        if sets.negatives is not None:
            ref["negative"] = target_logprob(forward_logits(model, sets.negatives), sets.negatives)
    return ref


def _trainables(model, tok, bank, sets: PromptSets, cfg: WallLearnConfig, layers: list[int],
                state: dict | None) -> _Trainables:
    if cfg.mode == "dense":
        bank.coefficients.requires_grad_(True)
        return _Trainables(None, bank, (bank,), None)
    cands = state["extra"]["candidates"] if state is not None else \
        score_candidates(model, tok, bank, sets.targets, sets.controls, cfg, layers)
    soft = SoftWalls(cands, bank=bank, temperature=cfg.temperature(0))
    with torch.no_grad():
        soft.gate.fill_(cfg.gate_init)
    return _Trainables(soft, soft, (soft, bank), cands)  # the walls outside the surfaces


def _loss(cfg: WallLearnConfig, soft: SoftWalls | None, reference: torch.Tensor, promote: bool):
    """The behaviour objective; for walls with the gates' L1 penalty and the box temperature of the step."""
    objective = PromptObjective(reference, promote, cfg.kl_threshold, cfg.kl_weight,
                                penalty=(lambda: cfg.sparsity * soft.gates().sum()) if soft is not None else None)
    if soft is None:
        return objective

    def loss(model, batch):
        soft.temperature = cfg.temperature(batch.step)
        return objective(model, batch)

    return loss


def _gate_record(soft: SoftWalls) -> dict:
    """The gates after a step (logged in its record)."""
    g = soft.gates().detach()
    return {"temperature": soft.temperature, "gates_open": int((g > 0.5).sum()), "gate_sum": float(g.sum())}


def _peek(state_dir: Path, resume: bool, overwrite: bool, run: dict) -> tuple[dict | None, Path | None]:
    """The checkpoint to resume (checked against this run before any model pass), or None."""

    found = find_checkpoint(state_dir)
    if found is not None and not resume and not overwrite:
        raise GeosteerError(f"{found} already exists; resume it (--resume) or pass --overwrite")
    state = load_checkpoint(found) if resume and found is not None else None
    if state is not None:
        check_run(state, run, found)  # before its candidates are used
    return state, found


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

    say = log or (lambda s: None)
    _check_inputs(targets, controls, cfg, promote, negatives)
    out = Path(out)
    check_output_folder(out, "geosteer-surfaces", what="--out")  # never over a folder of the user's files
    layers = anatomy(model).check_layers(cfg.layers if cfg.layers is not None else bank.layers)
    bos = bos_first(tok, cfg.add_bos)  # recorded resolved: a resume with another encoding is refused by name
    sets = PromptSets(encode_targets(tok, targets, bos), encode_controls(tok, controls, bos),
                      encode_targets(tok, negatives, bos) if negatives else None)
    state_dir = Path(str(out) + ".train")
    steer_fields = {"objective": "promote", "negatives": len(negatives or [])} if promote else {}
    fields = {"mode": cfg.mode, "layers": layers, "surfaces": _bank_digest(bank), "add_bos": bos, **steer_fields}
    state, _ = _peek(state_dir, resume, overwrite, run_record(model, **fields))
    t0 = time.perf_counter()
    bank.coefficients.requires_grad_(False)  # walls mode: the surfaces stay as they are
    ref = _references(model, bank, sets)
    tr = _trainables(model, tok, bank, sets, cfg, layers, state)
    tcfg = TrainConfig(lr=cfg.lr, steps=cfg.steps, batch_size=1, seq_len=1, warmup_steps=0, min_lr_ratio=1.0,
                       grad_clip=None, seed=cfg.seed, checkpoint_every=cfg.checkpoint_every,
                       eval_before_after=False, log_every=1)
    options = RunConfig(out_dir=state_dir, resume=resume, overwrite=overwrite, stop_at=stop_at, progress=False,
                        log=log, after_step=(lambda: _gate_record(tr.soft)) if tr.soft is not None else None,
                        record=fields, checkpoint_extra={"candidates": tr.candidates, "layers": layers,
                                                         "mode": cfg.mode},
                        checkpoint_at_start=True, interventions=tr.interventions, move_model=False)
    data = FullBatch(sets, _fingerprint(sets.targets, sets.controls, cfg, layers, sets.negatives), sets.tokens)
    say(f"{cfg.mode}: {len(tr.candidates) if tr.candidates else bank.n_parameters()} "
        f"{'candidate channels' if tr.candidates else 'coefficients'}, {cfg.steps} steps")
    try:
        res = fit(model, tr.module, tcfg, data, loss=_loss(cfg, tr.soft, ref["controls"], promote), options=options)
    finally:
        bank.coefficients.requires_grad_(False)
    if res.stopped_early:
        say(f"stopped after step {res.steps_done}/{cfg.steps}; resume with --resume")
        return bank, {"stopped": True, "steps_done": res.steps_done}
    report = {"mode": cfg.mode, "config": cfg.to_dict(), "layers": layers, "history": res.history,
              "reference": {"target_logprob": float(ref["target"].mean())}, "candidates": tr.candidates,
              "seconds_this_run": round(time.perf_counter() - t0, 1)}
    _edit_record(bank, tr.soft, report, promote, sets.negatives is not None, say)
    report["train_eval"] = _train_eval(model, bank, sets, ref, promote, say)
    _save(bank, out, state_dir, report, res.history, cfg, storage_dtype, command, promote)
    say(f"saved {out}")
    return bank, report


def _edit_record(bank, soft: SoftWalls | None, report: dict, promote: bool, negatives: bool, say) -> None:
    """Harden the learned walls into the bank (walls mode) and add the edit to the bank's history."""
    if soft is not None:
        walls = soft.harden()
        report["regions"] = [w.to_dict() for w in walls]
        report["regions_text"] = [w.describe() for w in walls]
        report["gates"] = soft.gates().detach().tolist()
        report["boxes"] = torch.stack([soft.q_lo, soft.q_hi, soft.k_lo, soft.k_hi], 1).detach().tolist()
        if not walls:
            say("no gate ended above 0.5: the artifact gets no walls (lower --sparsity or raise --kl-threshold)")
        bank.add_walls(walls)
        bank.history.append({"edit": "learn walls: " + ("; ".join(report["regions_text"]) or "no regions"),
                             "surfaces": len(walls), "coefficients": 0})
        return
    what = ("learn steering-surfaces: surfaces fine-tuned to promote the target continuations"
            + (" over the negatives" if negatives else "")) if promote else \
        "learn walls --mode dense: surfaces fine-tuned on the target/control objective"
    bank.history.append({"edit": what, "surfaces": bank.n_parameters() // bank.K ** 2,
                         "coefficients": bank.n_parameters()})


def _train_eval(model, bank, sets: PromptSets, ref: dict, promote: bool, say) -> dict:
    """The shipped bank (exact walls) on the training prompts, against the starting surfaces."""

    with torch.no_grad(), steer(model, bank):
        hard = objective_terms(model, sets, ref["controls"])
    te = {"target_logprob": float(hard["target_logprob"].mean()),
          "target_drop": float((ref["target"] - hard["target_logprob"]).mean()),
          "kl": float(hard["kl"]), "kl_last": float(hard["kl_last"])}
    if not promote:
        say(f"hard result on the training prompts: target log-prob drop {te['target_drop']:.4g}, control KL "
            f"{te['kl']:.4g} (last token {te['kl_last']:.4g})")
        return te
    te["target_gain"] = -te.pop("target_drop")
    if sets.negatives is not None:
        te["negative_logprob"] = float(hard["negative_logprob"].mean())
        te["negative_drop"] = float((ref["negative"] - hard["negative_logprob"]).mean())
    say(f"result on the training prompts: target log-prob gain {te['target_gain']:.4g}, control KL "
        f"{te['kl']:.4g} (last token {te['kl_last']:.4g})")
    return te


def _save(bank, out: Path, state_dir: Path, report: dict, history: list[dict], cfg: WallLearnConfig,
          storage_dtype: str, command: str | None, promote: bool) -> None:

    if command:
        report["command"] = command
        if bank.meta.get("command"):  # the card shows this run's command; the surfaces' own stays recorded
            bank.meta["surfaces_command"] = bank.meta["command"]
        bank.meta["command"] = command
    record = {k: v for k, v in report.items() if k != "history"}
    save(bank, out, dtype=storage_dtype, **({"steer_learn": record} if promote else {"wall_learn": record}))
    atomic_write_json(state_dir / "history.json", {"history": history, "config": cfg.to_dict()})
