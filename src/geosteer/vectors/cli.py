"""``geosteer learn vectors``: extract steering vectors from prompt pairs (or two prompt sets).

Every input is checked before the model loads; a bad one is one line ``error: ...`` and exit 2. ``geosteer show
DIR --export F.gguf`` exports an artifact as llama.cpp's control-vector file.
"""

from __future__ import annotations

from pathlib import Path

import typer

from geosteer.cli.common import check_layers, emit, load, model_config
from geosteer.cli.learning import (
    CHAT_OPT,
    DEVICE_OPT,
    DTYPE_OPT,
    JSON_OPT,
    MODEL_OPT,
    OVERWRITE_OPT,
    SYSTEM_OPT,
    THREADS_OPT,
    batch_size_opt,
    command_line,
    layers_opt,
    out_opt,
)
from geosteer.cli.preflight import check_prompt_positions, tokenizer_of


def _read_json(path: Path, what: str, check) -> list:
    from geosteer.errors import GeosteerError
    from geosteer.io_utils import read_json

    doc = read_json(path, f"{what} file")  # bounded: a regular file, size/nesting caps, valid Unicode
    try:
        check(doc)
    except GeosteerError as e:
        raise GeosteerError(f"{what} file {path}: {e}") from None
    return list(doc)


def read_pairs(path: Path) -> list[list[str]]:
    """A JSON file holding a non-empty list of [positive, negative] prompt pairs."""
    from geosteer.vectors.extract import _check_prompts

    return [list(p) for p in _read_json(path, "pairs", lambda d: _check_prompts(d, None, None))]


def read_prompt_sets(pairs: Path | None, positive: Path | None, negative: Path | None, method: str) -> dict:
    """The prompts of ``geosteer learn vectors`` as keyword arguments of :func:`geosteer.vectors.extract`: ``pairs``, or
    ``positive`` and ``negative`` (JSON lists of prompts; not for the PCA methods, which need pairs)."""
    from geosteer.errors import GeosteerError
    from geosteer.vectors.config import PAIRED_METHODS

    if pairs is not None:
        if positive is not None or negative is not None:
            raise GeosteerError("give either --pairs or --positive and --negative, not both")
        return {"pairs": read_pairs(pairs)}
    if positive is None or negative is None:
        raise GeosteerError("give --pairs FILE (a JSON list of [positive, negative] prompt pairs), or both "
                            "--positive FILE and --negative FILE (JSON lists of prompts)")
    if method in PAIRED_METHODS:
        raise GeosteerError(f"--method {method} needs --pairs (one negative per positive), not two prompt sets")
    return {name: _read_json(path, name, _check_prompt_list)
            for name, path in (("positive", positive), ("negative", negative))}


def _check_prompt_list(doc) -> None:
    from geosteer.errors import GeosteerError

    if not isinstance(doc, list) or not doc or not all(isinstance(t, str) for t in doc):
        raise GeosteerError("must hold a non-empty JSON list of prompts (strings)")


def chat_formatted(tok, prompts: dict, chat: bool, system: str | None, special_tokens: bool) -> dict:
    """The prompt sets of :func:`read_prompt_sets` with every prompt through the chat template (``--chat``;
    encoded as ``--special-tokens`` says), else unchanged."""
    from geosteer.eval.chat import format_prompt

    if not chat:
        return prompts
    add_bos = None if special_tokens else False

    def fmt(p: str) -> str:
        return format_prompt(tok, p, True, system, add_bos)
    return {k: [[fmt(x) for x in item] if isinstance(item, list) else fmt(item) for item in v]
            for k, v in prompts.items()}


def _texts(prompts: dict) -> list[str]:
    """Every prompt of :func:`read_prompt_sets`' keyword arguments, pairs flattened."""
    return [x for v in prompts.values() for item in v for x in (item if isinstance(item, list) else [item])]


def check_out(out: Path, overwrite: bool) -> None:
    """Refuse an output that would replace anything but a steering-vectors artifact (and that one without
    ``--overwrite``)."""
    from geosteer.errors import GeosteerError
    from geosteer.methods import is_artifact

    if not out.exists():
        return
    if not out.is_dir():
        raise GeosteerError(f"--out {out} exists and is not a folder")
    if not any(out.iterdir()):
        return
    if not is_artifact(out, "geosteer-vectors"):
        raise GeosteerError(f"--out {out} exists and is not a steering-vectors artifact; choose another folder")
    if not overwrite:
        raise GeosteerError(f"--out {out} already holds steering vectors; pass --overwrite to replace them")


def vectors_cmd(model: str = MODEL_OPT,
                pairs: Path | None = typer.Option(None, "--pairs", help="JSON list of [positive, negative] prompt "
                                                  "pairs"),
                positive: Path | None = typer.Option(None, "--positive", help="or: JSON list of positive prompts"),
                negative: Path | None = typer.Option(None, "--negative", help="and JSON list of negative prompts"),
                layers: str = layers_opt("all", "layers that get a vector"),
                point: str = typer.Option("resid_post", "--point", help="resid_pre | resid_post | attn_out | "
                                          "mlp_out"),
                method: str = typer.Option("mean_diff", "--method", help="mean_diff | pca | pca_diff | probe"),
                positions: str = typer.Option("last", "--positions", help="last | all | a token index k (k..end)"),
                out: Path = out_opt("geosteer-vectors", state=False),
                special_tokens: bool = typer.Option(True, "--special-tokens/--no-special-tokens",
                                                    help="encode prompts with the tokenizer's special tokens"),
                batch_size: int = batch_size_opt(8, "prompts per forward"),
                overwrite: bool = OVERWRITE_OPT,
                chat: bool = CHAT_OPT, system: str | None = SYSTEM_OPT,
                as_json: bool = JSON_OPT, threads: int = THREADS_OPT, device: str = DEVICE_OPT,
                dtype: str = DTYPE_OPT) -> None:
    """Extract one steering vector per layer from prompt pairs (or two prompt sets) and save the artifact."""
    from geosteer.eval.chat import check_chat_options
    from geosteer.vectors.config import ExtractConfig
    from geosteer.vectors.extract import extract

    check_chat_options(chat, system)
    cfg = ExtractConfig(point=point, method=method, positions=positions, add_special_tokens=special_tokens,
                        batch_size=batch_size)
    check_layers(model, "--layers", layers)  # the syntax; the range too where the config names it
    prompts = read_prompt_sets(pairs, positive, negative, cfg.method)
    check_out(out, overwrite)
    if not chat:  # prompts longer than the model's positions: refused before the model loads
        check_prompt_positions(tokenizer_of(model), model_config(model), _texts(prompts), "prompt",
                               special_tokens=special_tokens)
    m, tok = load(model, threads=threads, device=device, dtype=dtype)
    formatted = chat_formatted(tok, prompts, chat, system, special_tokens)
    check_prompt_positions(tok, m, _texts(formatted), "prompt", special_tokens=special_tokens)
    sv = extract(m, tok, layers=layers, config=cfg, **formatted)
    sv.save(out, command=command_line("vectors"))
    counts = {k: len(v) for k, v in prompts.items()}
    emit({"out": str(out), "point": sv.point, "method": method, **counts, "layers": list(sv.vectors),
          "norms": {str(k): round(v, 6) for k, v in sv.norms().items()}}, as_json)

