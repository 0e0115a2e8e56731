"""``geosteer study directional steer-learn``: learn per-layer ∥/⊥ scales that promote a continuation."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import typer

from geosteer.cli.common import (
    CHAT_OPT,
    DEVICE_OPT,
    DTYPE_OPT,
    JSON_OPT,
    MODEL_OPT,
    SYSTEM_OPT,
    THREADS_OPT,
    check_layers,
    emit,
    load,
)
from geosteer.cli.outputs import out_trained_artifact


def steer_learn_cmd(
    target_file: Path = typer.Option(..., "--target-file",
                                     help='JSON list of {"prompt", "target"}: the continuations to promote'),
    control_file: Path = typer.Option(..., "--control-file", help="JSON list of control prompt strings"),
    out: Path = typer.Option(..., "--out", "-o", help="recipe folder to write (state in <out>.train/)",
                              callback=out_trained_artifact("geosteer-recipe")),
    negative_file: Path = typer.Option(None, "--negative-file",
                                       help='JSON list of {"prompt", "target"}: continuations to push down'),
    model: str = MODEL_OPT,
    site: str = typer.Option("attn_out", "--site", help="attn_out | mlp_out | resid_post"),
    layers: str = typer.Option("all", "--layers", help="layers whose scales are learned, e.g. all, 8-15"),
    steps: int = typer.Option(30, "--steps"),
    lr: float = typer.Option(0.02, "--lr", help="AdamW learning rate on the scales"),
    kl_threshold: float = typer.Option(0.02, "--kl-threshold", help="control KL allowed (nats, > 0)"),
    kl_weight: float = typer.Option(100.0, "--kl-weight"),
    seed: int = typer.Option(0, "--seed"),
    checkpoint_every: int = typer.Option(5, "--checkpoint-every"),
    chat: bool = CHAT_OPT,
    system: str | None = SYSTEM_OPT,
    resume: bool = typer.Option(False, "--resume", help="continue from <out>.train/checkpoint.safetensors"),
    overwrite: bool = typer.Option(False, "--overwrite", help="start over even if a checkpoint exists"),
    threads: int = THREADS_OPT,
    device: str = DEVICE_OPT,
    dtype: str = DTYPE_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Learn s∥ and s⊥ per layer at a residual site so that the target continuations' log-prob rises (minus
    the negatives' when --negative-file is given) while the control prompts' next-token KL stays under
    --kl-threshold. The output is a recipe: geosteer ppl|generate|compare --recipe OUT applies it."""
    from geosteer.directional.steer_learn import ScaleLearnConfig, learn_scales
    from geosteer.eval.chat import check_chat_options, format_prompts, format_targets
    from geosteer.models.anatomy import anatomy, parse_layers
    from geosteer.train.prompts import read_controls, read_targets

    check_chat_options(chat, system)
    cfg = ScaleLearnConfig(site=site, steps=steps, lr=lr, kl_threshold=kl_threshold, kl_weight=kl_weight,
                           seed=seed, checkpoint_every=checkpoint_every)
    if resume and overwrite:
        raise ValueError("--resume and --overwrite contradict each other: give one (continue, or start over)")
    check_layers(model, "--layers", layers)  # the syntax; the range too where the config names it
    targets, controls = read_targets(target_file), read_controls(control_file)
    negatives = read_targets(negative_file) if negative_file is not None else None
    m, tok = load(model, threads=threads, device=device, dtype=dtype)
    cfg.layers = parse_layers(layers, anatomy(m).n_layers)
    targets, controls, negatives = (format_targets(tok, targets, chat, system, True),  # encoded BOS first
                                    format_prompts(tok, controls, chat, system, True),
                                    format_targets(tok, negatives, chat, system, True))
    args = sys.argv[1:]
    if "steer-learn" in args[:4]:
        args = args[args.index("steer-learn") + 1:]
    command = "geosteer study directional steer-learn " + " ".join(shlex.quote(a) for a in args)
    _, rep = learn_scales(m, tok, targets, controls, cfg, out, negatives=negatives, resume=resume,
                          overwrite=overwrite, command=command,
                          log=(lambda s: print(s, file=sys.stderr, flush=True)))
    emit({"out": str(out), **rep["train_eval"], "scales": rep["scales"]}, as_json)
