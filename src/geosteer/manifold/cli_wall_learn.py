"""``geosteer manifold wall-learn``: learn exact wall regions that suppress a target continuation."""

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
    SYSTEM_OPT,
    THREADS_OPT,
    check_layers,
    emit,
    load,
)
from geosteer.cli.outputs import out_trained_artifact


def wall_learn_cmd(
    surfaces: Path = typer.Option(..., "--surfaces", "-s", help="surfaces artifact folder to add walls to"),
    target_file: Path = typer.Option(..., "--target-file", help='JSON list of {"prompt", "target"}'),
    control_file: Path = typer.Option(..., "--control-file", help="JSON list of control prompt strings"),
    out: Path = typer.Option(..., "--out", "-o", help="artifact folder to write (state in <out>.train/)",
                              callback=out_trained_artifact("geosteer-surfaces")),
    model: str = typer.Option(None, "--model", "-m", help="base model (default: the artifact's)"),
    layers: str = typer.Option(None, "--layers", help="candidate layers, e.g. 8-15 (default: the surfaces' layers)"),
    candidates: int = typer.Option(256, "--candidates", help="channels kept after contrastive scoring"),
    steps: int = typer.Option(30, "--steps"),
    lr: float = typer.Option(0.1, "--lr"),
    kl_threshold: float = typer.Option(0.02, "--kl-threshold", help="control KL allowed (nats, > 0)"),
    kl_weight: float = typer.Option(100.0, "--kl-weight"),
    sparsity: float = typer.Option(0.002, "--sparsity", help="L1 weight on the gates"),
    mode: str = typer.Option("walls", "--mode", help="walls | dense (fine-tune the surfaces: a baseline)"),
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
    """Learn a short list of exact wall regions (layer, head, dim, q-box, k-box) that lower the target
    continuations' log-prob while keeping the control prompts' next-token KL under --kl-threshold."""
    from geosteer.eval.chat import check_chat_options, format_prompts, format_targets
    from geosteer.manifold import load as load_surfaces
    from geosteer.manifold import read_config
    from geosteer.manifold.wall_learn import WallLearnConfig, read_controls, read_targets
    from geosteer.manifold.wall_learn_train import learn_walls
    from geosteer.models.anatomy import parse_layers

    check_chat_options(chat, system)
    cfg = WallLearnConfig(candidates=candidates, steps=steps, lr=lr, kl_threshold=kl_threshold,
                          kl_weight=kl_weight, sparsity=sparsity, mode=mode, seed=seed,
                          checkpoint_every=checkpoint_every, add_bos=True if bos else None)
    targets, controls = read_targets(target_file), read_controls(control_file)
    if resume and overwrite:
        raise ValueError("--resume and --overwrite contradict each other: give one (continue, or start over)")
    doc = read_config(surfaces)
    name = model or doc.get("base_model")
    if not name:
        raise ValueError("the artifact does not name its base model; pass --model")
    check_layers(name, "--layers", layers)  # the syntax; the range too where the config names it
    m, tok = load(name, threads=threads, device=device, dtype=dtype)
    bank = load_surfaces(surfaces, model=m, force=force)
    targets = format_targets(tok, targets, chat, system, cfg.add_bos)
    controls = format_prompts(tok, controls, chat, system, cfg.add_bos)
    if layers is not None:
        from geosteer.models.anatomy import anatomy

        cfg.layers = parse_layers(layers, anatomy(m).n_layers)
    args = sys.argv[1:]
    if "wall-learn" in args[:3]:
        args = args[args.index("wall-learn") + 1:]
    command = "geosteer manifold wall-learn " + " ".join(shlex.quote(a) for a in args)
    _, rep = learn_walls(m, tok, bank, targets, controls, cfg, out, resume=resume, overwrite=overwrite,
                         storage_dtype=doc.get("storage_dtype") or "float32", command=command,
                         log=(lambda s: print(s, file=sys.stderr, flush=True)))
    summary = {"out": str(out), "mode": cfg.mode, **rep["train_eval"],
               "regions": rep.get("regions_text", [])}
    emit(summary, as_json)
