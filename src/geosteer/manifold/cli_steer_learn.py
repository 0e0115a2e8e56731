"""``geosteer manifold steer-learn``: fine-tune surfaces to promote a target continuation (steering)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import typer

from geosteer.cli.common import CHAT_OPT, DEVICE_OPT, DTYPE_OPT, JSON_OPT, SYSTEM_OPT, THREADS_OPT, emit, load
from geosteer.cli.outputs import out_trained_artifact


def steer_learn_cmd(
    surfaces: Path = typer.Option(..., "--surfaces", "-s", help="surfaces artifact folder to start from"),
    target_file: Path = typer.Option(..., "--target-file",
                                     help='JSON list of {"prompt", "target"}: the continuations to promote'),
    control_file: Path = typer.Option(..., "--control-file", help="JSON list of control prompt strings"),
    out: Path = typer.Option(..., "--out", "-o", help="artifact folder to write (state in <out>.train/)",
                              callback=out_trained_artifact("geosteer-surfaces")),
    negative_file: Path = typer.Option(None, "--negative-file",
                                       help='JSON list of {"prompt", "target"}: continuations to push down'),
    model: str = typer.Option(None, "--model", "-m", help="base model (default: the artifact's)"),
    steps: int = typer.Option(30, "--steps"),
    lr: float = typer.Option(0.02, "--lr", help="AdamW learning rate on the surface coefficients"),
    kl_threshold: float = typer.Option(0.02, "--kl-threshold", help="control KL allowed (nats, > 0)"),
    kl_weight: float = typer.Option(100.0, "--kl-weight"),
    seed: int = typer.Option(0, "--seed"),
    checkpoint_every: int = typer.Option(5, "--checkpoint-every"),
    bos: bool = typer.Option(False, "--bos", help="put the BOS token first in every prompt (default: encode as "
                                               "the model's tokenizer does, with its own BOS convention)"),
    chat: bool = CHAT_OPT,
    system: str | None = SYSTEM_OPT,
    resume: bool = typer.Option(False, "--resume", help="continue from <out>.train/checkpoint.safetensors"),
    overwrite: bool = typer.Option(False, "--overwrite", help="start over even if a checkpoint exists"),
    force: bool = typer.Option(False, "--force", help="use the surfaces on --model even if made for another"),
    threads: int = THREADS_OPT,
    device: str = DEVICE_OPT,
    dtype: str = DTYPE_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Fine-tune the surfaces so that the target continuations' log-prob rises (minus the negatives' when
    --negative-file is given) while the control prompts' next-token KL stays under --kl-threshold.
    The output is a surfaces artifact: use it with --surfaces or --set surfaces=DIR."""
    from geosteer.eval.chat import check_chat_options, format_prompts, format_targets
    from geosteer.manifold import load as load_surfaces
    from geosteer.manifold import read_config
    from geosteer.manifold.wall_learn import WallLearnConfig, read_controls, read_targets
    from geosteer.manifold.wall_learn_train import learn_walls

    check_chat_options(chat, system)
    cfg = WallLearnConfig(steps=steps, lr=lr, kl_threshold=kl_threshold, kl_weight=kl_weight, mode="dense",
                          sparsity=0.0, seed=seed, checkpoint_every=checkpoint_every, add_bos=True if bos else None)
    targets, controls = read_targets(target_file), read_controls(control_file)
    negatives = read_targets(negative_file) if negative_file is not None else None
    if resume and overwrite:
        raise ValueError("--resume and --overwrite contradict each other: give one (continue, or start over)")
    doc = read_config(surfaces)
    name = model or doc.get("base_model")
    if not name:
        raise ValueError("the artifact does not name its base model; pass --model")
    m, tok = load(name, threads=threads, device=device, dtype=dtype)
    bank = load_surfaces(surfaces, model=m, force=force)
    targets, controls, negatives = (format_targets(tok, targets, chat, system, cfg.add_bos),
                                    format_prompts(tok, controls, chat, system, cfg.add_bos),
                                    format_targets(tok, negatives, chat, system, cfg.add_bos))
    args = sys.argv[1:]
    if "steer-learn" in args[:3]:
        args = args[args.index("steer-learn") + 1:]
    command = "geosteer manifold steer-learn " + " ".join(shlex.quote(a) for a in args)
    _, rep = learn_walls(m, tok, bank, targets, controls, cfg, out, resume=resume, overwrite=overwrite,
                         storage_dtype=doc.get("storage_dtype") or "float32", command=command,
                         log=(lambda s: print(s, file=sys.stderr, flush=True)), promote=True,
                         negatives=negatives)
    emit({"out": str(out), **rep["train_eval"]}, as_json)
