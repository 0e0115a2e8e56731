"""What every ``geosteer learn <learner>`` shares: its options, declared once (an option whose default differs
per learner is a function of that default), the resume rule, the prompt files and the command line an
artifact records. The model and machine options are :mod:`geosteer.cli.common`'s, re-exported.
"""

from __future__ import annotations

import shlex
import sys

import typer

from geosteer.cli.common import (
    CHAT_OPT,
    DEVICE_OPT,
    DTYPE_OPT,
    JSON_OPT,
    MODEL_OPT,
    SYSTEM_OPT,
    THREADS_OPT,
)
from geosteer.cli.outputs import out_artifact, out_trained_artifact

__all__ = [
    "BOS_OPT", "CHAT_OPT", "CONTROL_FILE_OPT", "DEVICE_OPT", "DTYPE_OPT", "FORCE_SURFACES_OPT", "JSON_OPT",
    "KL_THRESHOLD_OPT", "KL_WEIGHT_OPT", "MODEL_FROM_ARTIFACT_OPT", "MODEL_OPT", "NEGATIVE_FILE_OPT",
    "OVERWRITE_OPT", "RESUME_OPT", "SEED_OPT", "SYSTEM_OPT", "THREADS_OPT", "batch_size_opt",
    "checkpoint_every_opt", "check_resume", "command_line", "context_opt", "format_prompt_files", "layers_opt",
    "log", "lr_opt", "out_opt", "read_prompt_files", "steps_opt", "target_file_opt",
]


def out_opt(kind: str, *, state: bool = True, what: str = "artifact folder") -> typer.models.OptionInfo:
    """``--out DIR``: the artifact a learner writes (format ``kind``; with ``state``, its run state and
    checkpoints in ``<out>.train/``), checked while the command line is parsed."""
    check = out_trained_artifact(kind) if state else out_artifact(kind)
    where = " (state in <out>.train/)" if state else ""
    return typer.Option(..., "--out", "-o", help=f"{what} to write{where}", callback=check)


OVERWRITE_OPT = typer.Option(False, "--overwrite", help="start over: replace the checkpoint and the artifact "
                             "that --out holds")
RESUME_OPT = typer.Option(False, "--resume", help="continue from <out>.train/checkpoint.safetensors")
SEED_OPT = typer.Option(0, "--seed", help="random seed of the run")


def steps_opt(default: int | None) -> typer.models.OptionInfo:
    """``--steps N``: optimizer steps."""
    return typer.Option(default, "--steps", help="optimizer steps")


def lr_opt(default: float) -> typer.models.OptionInfo:
    """``--lr``: the AdamW learning rate on the learned parameters."""
    return typer.Option(default, "--lr", help="AdamW learning rate on the learned parameters")


def context_opt(default: int) -> typer.models.OptionInfo:
    """``--context N``: training window length in tokens."""
    return typer.Option(default, "--context", help="training window length in tokens")


def batch_size_opt(default: int, what: str = "windows per step (global)") -> typer.models.OptionInfo:
    """``--batch-size N``."""
    return typer.Option(default, "--batch-size", help=what)


def checkpoint_every_opt(default: int) -> typer.models.OptionInfo:
    """``--checkpoint-every N``: steps between checkpoints in ``<out>.train/``."""
    return typer.Option(default, "--checkpoint-every", help="steps between checkpoints in <out>.train/ "
                        "(0: none)")


def layers_opt(default: str | None, what: str = "layers that learn") -> typer.models.OptionInfo:
    """``--layers``: a layer list (``8-15``, ``0,2,5-7``, ``all``)."""
    return typer.Option(default, "--layers", help=f"{what}, e.g. all, 8-15, 0,2,5-7")


# The learners from prompt sets: raise (or lower) a continuation under a control-KL budget.
def target_file_opt(what: str = "the continuations to promote") -> typer.models.OptionInfo:
    """``--target-file``: the JSON list of ``{"prompt", "target"}`` a prompt learner moves."""
    return typer.Option(..., "--target-file", help=f'JSON list of {{"prompt", "target"}}: {what}')


CONTROL_FILE_OPT = typer.Option(..., "--control-file", help="JSON list of control prompt strings (their "
                                "next-token KL to the starting model is the budget)")
NEGATIVE_FILE_OPT = typer.Option(None, "--negative-file",
                                 help='JSON list of {"prompt", "target"}: continuations to push down')
KL_THRESHOLD_OPT = typer.Option(0.02, "--kl-threshold", help="control KL allowed (nats, > 0)")
KL_WEIGHT_OPT = typer.Option(100.0, "--kl-weight", help="weight of the control-KL hinge in the loss")
BOS_OPT = typer.Option(False, "--bos", help="put the BOS token first in every prompt (default: encode as the "
                       "model's tokenizer does, with its own BOS convention)")
MODEL_FROM_ARTIFACT_OPT = typer.Option(None, "--model", "-m", help="base model (default: the artifact's)")
FORCE_SURFACES_OPT = typer.Option(False, "--force", help="use the surfaces on --model even if made for another")


def check_resume(resume: bool, overwrite: bool) -> None:
    """``--resume`` and ``--overwrite`` together contradict each other (refused before the model loads)."""
    if resume and overwrite:
        raise ValueError("--resume and --overwrite contradict each other: give one (continue, or start over)")


def command_line(learner: str, argv: list[str] | None = None) -> str:
    """The command an artifact records: ``geosteer learn <learner>`` and the arguments given after it."""
    args = list(sys.argv[1:] if argv is None else argv)
    if learner in args[:3]:
        args = args[args.index(learner) + 1:]
    return " ".join(["geosteer", "learn", learner, *(shlex.quote(a) for a in args)])


def log(line: str) -> None:
    """A learner's progress line (stderr, flushed)."""
    print(line, file=sys.stderr, flush=True)



def read_prompt_files(target_file, control_file, negative_file=None, *, chat: bool = False,
                      system: str | None = None) -> tuple:
    """(targets, controls, negatives) of a prompt learner, read and checked before the model loads."""
    from geosteer.eval.chat import check_chat_options
    from geosteer.train.prompts import read_controls, read_targets

    check_chat_options(chat, system)
    negatives = read_targets(negative_file) if negative_file is not None else None
    return read_targets(target_file), read_controls(control_file), negatives


def format_prompt_files(tok, sets: tuple, chat: bool, system: str | None, add_bos: bool | None) -> tuple:
    """The sets of :func:`read_prompt_files` as the model reads them (chat template, BOS)."""
    from geosteer.eval.chat import format_prompts, format_targets

    targets, controls, negatives = sets
    return (format_targets(tok, targets, chat, system, add_bos), format_prompts(tok, controls, chat, system, add_bos),
            format_targets(tok, negatives, chat, system, add_bos))
