"""The learners of attention manifolds: ``geosteer learn surfaces | walls | steering-surfaces``.

``surfaces`` trains surfaces on a corpus (language-modelling loss); ``walls`` and ``steering-surfaces`` start
from a surfaces artifact and lower (raise) target continuations under a control-KL budget. Their shared options
are :mod:`geosteer.cli.learning`'s.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from geosteer.cli.common import check_layers, check_positions, emit, load, set_threads
from geosteer.cli.learning import (
    BOS_OPT,
    CHAT_OPT,
    CONTROL_FILE_OPT,
    DEVICE_OPT,
    DTYPE_OPT,
    FORCE_SURFACES_OPT,
    JSON_OPT,
    KL_THRESHOLD_OPT,
    KL_WEIGHT_OPT,
    MODEL_FROM_ARTIFACT_OPT,
    MODEL_OPT,
    NEGATIVE_FILE_OPT,
    OVERWRITE_OPT,
    RESUME_OPT,
    SEED_OPT,
    SYSTEM_OPT,
    THREADS_OPT,
    batch_size_opt,
    check_resume,
    checkpoint_every_opt,
    command_line,
    context_opt,
    format_prompt_files,
    layers_opt,
    log,
    lr_opt,
    out_opt,
    read_prompt_files,
    steps_opt,
    target_file_opt,
)

MAX_GRID = 128  # grid intervals at most: coefficients grow as (g + 3)^2 per head and dimension
SURFACES_OUT = "geosteer-surfaces"
START_OPT = typer.Option(..., "--surfaces", "-s", help="surfaces artifact folder to start from")


def surfaces_cmd(
    out: Path = out_opt(SURFACES_OUT),
    model: str = MODEL_OPT,
    grid: int = typer.Option(8, "--grid", max=MAX_GRID, help="grid intervals g (K = g + 3 basis functions)"),
    grid_range: tuple[float, float] = typer.Option((-4.0, 4.0), "--range", help="grid range LO HI"),
    calibrate: bool = typer.Option(False, "--calibrate", help="per-layer range from q/k quantiles"),
    quantile: float = typer.Option(0.99, "--quantile", help="quantile of |q|,|k| for --calibrate"),
    layers: str = layers_opt("all"),
    rank: int = typer.Option(None, "--rank", help="train rank-r surfaces, C = U Wᵀ with r < K (default: full rank)"),
    fluency_weight: float = typer.Option(0.0, "--fluency-weight", help="weight β of the fluency term "
                                         "β·KL(P_surfaces ‖ P_stock) per token beside the cross-entropy (0: off)"),
    tokens: int = typer.Option(None, "--tokens", help="training tokens (default 262144 unless --steps)"),
    steps: int = steps_opt(None),
    seq_len: int = context_opt(128),
    batch: int = batch_size_opt(8),
    micro_batch: int = typer.Option(None, "--micro-batch", help="split each step (less memory)"),
    lr: float = lr_opt(2e-2),
    warmup: int = typer.Option(None, "--warmup", help="warmup steps (default 5%)"),
    seed: int = SEED_OPT,
    text: str = typer.Option("train", "--text", help="corpus split (train) or a UTF-8 text file"),
    eval_tokens: int = typer.Option(16384, "--eval-tokens", help="held-out tokens per evaluation"),
    eval_every: int = typer.Option(0, "--eval-every", help="steps between held-out evaluations"),
    checkpoint_every: int = checkpoint_every_opt(25),
    resume: bool = RESUME_OPT,
    overwrite: bool = OVERWRITE_OPT,
    save_dtype: str = typer.Option(None, "--save-dtype", help="artifact storage dtype: float32 | float16 "
                                   "(default float32)"),
    mixed_precision: str = typer.Option("no", "--mixed-precision", help="no|bf16|fp16 (accelerate; GPU)"),
    fsdp: bool = typer.Option(False, "--fsdp", help="shard the frozen model over the processes "
                              "(accelerate launch, FSDP2)"),
    schedule: str = typer.Option("cosine", "--schedule", help="lr schedule: cosine (warmup, cosine to 0.1x) | "
                                 "linear | constant (transformers' schedules)"),
    log_with: str = typer.Option(None, "--log-with", help="experiment trackers, e.g. tensorboard or "
                                 "tensorboard,wandb (accelerate; logs in <out>.train/logs)"),
    threads: int = THREADS_OPT,
    device: str = DEVICE_OPT,
    dtype: str = DTYPE_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Train attention surfaces on a frozen model with the language-modelling loss (only the surface
    coefficients train)."""
    from geosteer import anatomy
    from geosteer.data.corpus import SPLITS
    from geosteer.manifold.train import check_kl_weight, check_options, train_surfaces
    from geosteer.models.anatomy import parse_layers
    from geosteer.train import TrainConfig

    if tokens is None and steps is None:
        tokens = 262_144
    if save_dtype is None and dtype != "float32":
        typer.echo(f"note: --dtype {dtype} sets the model weights (as on every verb); the artifact is stored "
                   "as float32 (--save-dtype float16 for half)", err=True)
    save_dtype = save_dtype or "float32"
    check_options(out=out, grid_size=grid, grid_range=tuple(grid_range), calibrate=calibrate,
                  quantile=quantile, storage_dtype=save_dtype, text=text, rank=rank)
    check_kl_weight(fluency_weight, "--fluency-weight")
    check_resume(resume, overwrite)
    if text not in SPLITS:
        from geosteer.eval.textfile import check_text_file

        check_text_file(text, "--text file")
    check_layers(model, "--layers", layers)  # the syntax; the range too where the config names it
    check_positions(model, "--context", seq_len)
    set_threads(threads)
    cfg = TrainConfig(lr=lr, steps=steps, tokens=tokens, batch_size=batch, micro_batch=micro_batch,
                      seq_len=seq_len, warmup_steps=warmup, seed=seed, eval_every=eval_every,
                      eval_tokens=eval_tokens, checkpoint_every=checkpoint_every,
                      mixed_precision=mixed_precision, fsdp=fsdp, schedule=schedule, log_with=log_with)
    if cfg.log_with:
        from geosteer.train.tracking import require_trackers

        require_trackers(cfg.log_with)  # before the model loads
    m, tok = load(model, threads=threads, device=device, dtype=dtype)
    _, res = train_surfaces(m, tok, out, grid_size=grid, grid_range=tuple(grid_range),
                            calibrate=calibrate, calibrate_quantile=quantile,
                            layers=parse_layers(layers, anatomy(m).n_layers), cfg=cfg, text=text,
                            resume=resume, overwrite=overwrite, storage_dtype=save_dtype, rank=rank,
                            command=command_line("surfaces"), progress=sys.stderr.isatty() and not as_json,
                            log=log, kl_weight=fluency_weight)
    emit({"out": str(out), "steps": res.steps_done, "tokens": res.tokens_seen, "final_loss": res.final_loss,
          "ppl_before": res.ppl_before, "ppl_after": res.ppl_after, "seconds": round(res.seconds, 1)}, as_json)


def _start(surfaces: Path, model: str | None, layers: str | None, threads: int, device: str, dtype: str,
           force: bool):
    """The model (``--model``, else the artifact's base model) and the surfaces a prompt learner starts from;
    the layer list checked before the model loads."""
    from geosteer.manifold import load as load_surfaces
    from geosteer.manifold import read_config

    doc = read_config(surfaces)
    name = model or doc.get("base_model")
    if not name:
        raise ValueError("the artifact does not name its base model; pass --model")
    check_layers(name, "--layers", layers)  # the syntax; the range too where the config names it
    m, tok = load(name, threads=threads, device=device, dtype=dtype)
    return m, tok, load_surfaces(surfaces, model=m, force=force), doc.get("storage_dtype") or "float32"


def walls_cmd(
    surfaces: Path = typer.Option(..., "--surfaces", "-s", help="surfaces artifact folder to add walls to"),
    target_file: Path = target_file_opt("the continuations to suppress"),
    control_file: Path = CONTROL_FILE_OPT,
    out: Path = out_opt(SURFACES_OUT),
    model: str = MODEL_FROM_ARTIFACT_OPT,
    layers: str = layers_opt(None, "candidate layers (default: the surfaces' layers)"),
    candidates: int = typer.Option(256, "--candidates", help="channels kept after contrastive scoring"),
    steps: int = steps_opt(30),
    lr: float = lr_opt(0.1),
    kl_threshold: float = KL_THRESHOLD_OPT,
    kl_weight: float = KL_WEIGHT_OPT,
    sparsity: float = typer.Option(0.002, "--sparsity", help="L1 weight on the gates"),
    mode: str = typer.Option("walls", "--mode", help="walls | dense (fine-tune the surfaces: a baseline)"),
    seed: int = SEED_OPT,
    checkpoint_every: int = checkpoint_every_opt(5),
    bos: bool = BOS_OPT,
    chat: bool = CHAT_OPT,
    system: str | None = SYSTEM_OPT,
    resume: bool = RESUME_OPT,
    overwrite: bool = OVERWRITE_OPT,
    force: bool = FORCE_SURFACES_OPT,
    threads: int = THREADS_OPT,
    device: str = DEVICE_OPT,
    dtype: str = DTYPE_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Learn a short list of exact wall regions (layer, head, dim, q-box, k-box) that lower the target
    continuations' log-prob while keeping the control prompts' next-token KL under --kl-threshold."""
    from geosteer.manifold.wall_learn import WallLearnConfig
    from geosteer.manifold.wall_learn_train import learn_walls
    from geosteer.models.anatomy import anatomy, parse_layers

    cfg = WallLearnConfig(candidates=candidates, steps=steps, lr=lr, kl_threshold=kl_threshold,
                          kl_weight=kl_weight, sparsity=sparsity, mode=mode, seed=seed,
                          checkpoint_every=checkpoint_every, add_bos=True if bos else None)
    sets = read_prompt_files(target_file, control_file, chat=chat, system=system)
    check_resume(resume, overwrite)
    m, tok, bank, storage = _start(surfaces, model, layers, threads, device, dtype, force)
    targets, controls, _ = format_prompt_files(tok, sets, chat, system, cfg.add_bos)
    if layers is not None:
        cfg.layers = parse_layers(layers, anatomy(m).n_layers)
    _, rep = learn_walls(m, tok, bank, targets, controls, cfg, out, resume=resume, overwrite=overwrite,
                         storage_dtype=storage, command=command_line("walls"), log=log)
    emit({"out": str(out), "mode": cfg.mode, **rep["train_eval"], "regions": rep.get("regions_text", [])}, as_json)


def steering_surfaces_cmd(
    surfaces: Path = START_OPT,
    target_file: Path = target_file_opt(),
    control_file: Path = CONTROL_FILE_OPT,
    out: Path = out_opt(SURFACES_OUT),
    negative_file: Path = NEGATIVE_FILE_OPT,
    model: str = MODEL_FROM_ARTIFACT_OPT,
    steps: int = steps_opt(30),
    lr: float = lr_opt(0.02),
    kl_threshold: float = KL_THRESHOLD_OPT,
    kl_weight: float = KL_WEIGHT_OPT,
    seed: int = SEED_OPT,
    checkpoint_every: int = checkpoint_every_opt(5),
    bos: bool = BOS_OPT,
    chat: bool = CHAT_OPT,
    system: str | None = SYSTEM_OPT,
    resume: bool = RESUME_OPT,
    overwrite: bool = OVERWRITE_OPT,
    force: bool = FORCE_SURFACES_OPT,
    threads: int = THREADS_OPT,
    device: str = DEVICE_OPT,
    dtype: str = DTYPE_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Fine-tune the surfaces so that the target continuations' log-prob rises (minus the negatives' when
    --negative-file is given) while the control prompts' next-token KL stays under --kl-threshold.
    The output is a surfaces artifact: use it with --surfaces or --set surfaces=DIR."""
    from geosteer.manifold.wall_learn import WallLearnConfig
    from geosteer.manifold.wall_learn_train import learn_walls

    cfg = WallLearnConfig(steps=steps, lr=lr, kl_threshold=kl_threshold, kl_weight=kl_weight, mode="dense",
                          sparsity=0.0, seed=seed, checkpoint_every=checkpoint_every, add_bos=True if bos else None)
    sets = read_prompt_files(target_file, control_file, negative_file, chat=chat, system=system)
    check_resume(resume, overwrite)
    m, tok, bank, storage = _start(surfaces, model, None, threads, device, dtype, force)
    targets, controls, negatives = format_prompt_files(tok, sets, chat, system, cfg.add_bos)
    _, rep = learn_walls(m, tok, bank, targets, controls, cfg, out, resume=resume, overwrite=overwrite,
                         storage_dtype=storage, command=command_line("steering-surfaces"), log=log,
                         promote=True, negatives=negatives)
    emit({"out": str(out), **rep["train_eval"]}, as_json)
