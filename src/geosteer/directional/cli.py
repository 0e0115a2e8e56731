"""``geosteer measure decompose``: the ∥/⊥ measurement of a model's updates (``geosteer learn scales`` is in
:mod:`geosteer.directional.cli_learn`)."""

from __future__ import annotations

from pathlib import Path

import typer

from geosteer.cli.common import (
    DEVICE_OPT,
    DTYPE_OPT,
    JSON_OPT,
    MODEL_OPT,
    THREADS_OPT,
    check_layers,
    check_positions,
    emit,
    load,
)
from geosteer.cli.outputs import out_file, out_records
from geosteer.directional.config import DEFAULT_VALUE_SPACE


def decompose_cmd(
    model: str = MODEL_OPT,
    corpus: str = typer.Option("heldout", "--corpus", help="corpus split to read: heldout | train"),
    text_file: Path | None = typer.Option(None, "--text-file", help="read this text file"),
    tokens: int = typer.Option(512, "--tokens", min=1, help="tokens to measure (from the start of the text)"),
    chunk: int = typer.Option(512, "--chunk", min=1, help="tokens per forward pass"),
    layers: str = typer.Option("all", "--layers", help="'all', '3', '0-5', '0-5,9'"),
    value: bool = typer.Option(True, "--value/--no-value", help="also measure value space"),
    value_space: str = typer.Option(DEFAULT_VALUE_SPACE, "--value-space",
                                    help="value space: head (one row per head) | concat (all heads, one row)"),
    generate: str | None = typer.Option(None, "--generate", help="measure per generation step"),
    max_new_tokens: int = typer.Option(32, "--max-new-tokens", min=1),
    as_json: bool = JSON_OPT,
    csv: Path | None = typer.Option(None, "--csv", help="write tidy rows to this CSV file", callback=out_file(".csv")),
    out: Path | None = typer.Option(None, "--out", help="write tidy rows (+meta) to this .json/.csv file",
                                    callback=out_records()),
    threads: int = THREADS_OPT,
    device: str = DEVICE_OPT, dtype: str = DTYPE_OPT,
) -> None:
    """Per-layer ∥/⊥ decomposition of the attention, MLP and block updates (and value space per head or
    concatenated)."""
    from geosteer.directional.config import check_value_space
    from geosteer.directional.measure import measure_generation, measure_text
    from geosteer.eval.textfile import read_text_file
    from geosteer.io_utils import write_records
    from geosteer.models.loading import model_id

    check_layers(model, "--layers", layers)
    check_value_space(value_space)
    if generate is None:
        check_positions(model, "--tokens/--chunk window", min(tokens, chunk))
    elif not generate.strip():
        raise ValueError("--generate: the prompt is empty")
    text = None
    if generate is None:
        from geosteer.data.corpus import split_text

        text = read_text_file(text_file) if text_file is not None else split_text(corpus, max_chars=tokens * 10)
    m, tok = load(model, threads=threads, device=device, dtype=dtype)
    if generate is not None:
        rows, meta = measure_generation(m, tok, generate, max_new_tokens=max_new_tokens, layers=layers,
                                        value=value, value_space=value_space)
    else:
        rows, meta = measure_text(m, tok, text, tokens=tokens, chunk=chunk, layers=layers, value=value,
                                  value_space=value_space)
    meta = {"model": model_id(m), **meta}
    for path in (csv, out):
        if path is not None:
            write_records(path, rows, meta)
    if as_json:
        emit({"meta": meta, "rows": rows}, True)
    elif csv is None and out is None:
        keep = ("step", "layer", "site", "head", "ratio_mean", "abs_cos_mean", "alpha_mean",
                "rel_norm_mean", "a_self_mean", "c_ratio_mean")
        show = [r for r in rows if r.get("head", -1) in (-1, None)] or rows
        emit([{k: r[k] for k in keep if k in r} for r in show], False, table_title="decomposition")

