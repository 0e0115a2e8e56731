"""``geosteer learn loreft``: learn a LoReFT that promotes a continuation under a control-KL budget.

Its shared options are :mod:`geosteer.cli.learning`'s."""

from __future__ import annotations

from pathlib import Path

import typer

from geosteer.cli.common import check_layers, emit, load
from geosteer.cli.learning import (
    CHAT_OPT,
    CONTROL_FILE_OPT,
    DEVICE_OPT,
    DTYPE_OPT,
    JSON_OPT,
    KL_THRESHOLD_OPT,
    KL_WEIGHT_OPT,
    MODEL_OPT,
    NEGATIVE_FILE_OPT,
    OVERWRITE_OPT,
    RESUME_OPT,
    SEED_OPT,
    SYSTEM_OPT,
    THREADS_OPT,
    check_resume,
    checkpoint_every_opt,
    command_line,
    format_prompt_files,
    layers_opt,
    log,
    lr_opt,
    out_opt,
    read_prompt_files,
    steps_opt,
    target_file_opt,
)


def loreft_cmd(
    target_file: Path = target_file_opt(),
    control_file: Path = CONTROL_FILE_OPT,
    out: Path = out_opt("geosteer-loreft", what="LoReFT artifact folder"),
    negative_file: Path = NEGATIVE_FILE_OPT,
    model: str = MODEL_OPT,
    layers: str = layers_opt("all"),
    rank: int = typer.Option(4, "--rank", min=1, help="rank r of R and W (per layer)"),
    steps: int = steps_opt(30),
    lr: float = lr_opt(0.002),
    kl_threshold: float = KL_THRESHOLD_OPT,
    kl_weight: float = KL_WEIGHT_OPT,
    seed: int = SEED_OPT,
    checkpoint_every: int = checkpoint_every_opt(5),
    chat: bool = CHAT_OPT,
    system: str | None = SYSTEM_OPT,
    resume: bool = RESUME_OPT,
    overwrite: bool = OVERWRITE_OPT,
    threads: int = THREADS_OPT,
    device: str = DEVICE_OPT,
    dtype: str = DTYPE_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Learn LoReFT (h + Rᵀ(W h + b − R h) after each of --layers, every position) so that the target
    continuations' log-prob rises (minus the negatives' when --negative-file is given) while the control
    prompts' next-token KL stays under --kl-threshold. Prompts are encoded BOS first. The output is a LoReFT
    artifact: geosteer generate --set loreft=OUT (loreft_strength=s scales it) applies it."""
    from geosteer.loreft.learn import LoReFTLearnConfig, learn_loreft
    from geosteer.models.anatomy import anatomy, parse_layers

    cfg = LoReFTLearnConfig(rank=rank, steps=steps, lr=lr, kl_threshold=kl_threshold, kl_weight=kl_weight,
                            seed=seed, checkpoint_every=checkpoint_every)
    check_resume(resume, overwrite)
    check_layers(model, "--layers", layers)
    sets = read_prompt_files(target_file, control_file, negative_file, chat=chat, system=system)
    m, tok = load(model, threads=threads, device=device, dtype=dtype)
    cfg.layers = parse_layers(layers, anatomy(m).n_layers)
    targets, controls, negatives = format_prompt_files(tok, sets, chat, system, True)  # encoded BOS first
    lo, rep = learn_loreft(m, tok, targets, controls, cfg, out, negatives=negatives, resume=resume,
                           overwrite=overwrite, command=command_line("loreft"), log=log)
    emit({"out": str(out), **rep.get("train_eval", {}), "layers": lo.layers, "rank": lo.rank}, as_json)
