"""CLI: ``geosteer decompose`` (measurement) and the hidden ``geosteer directional …`` old spellings.

The method's studies (the sweep, pretraining, the views) are in ``geosteer.directional.studies``; the
compression-error study runs as ``python studies/directional/compression.py``."""

from __future__ import annotations

from pathlib import Path

import typer

from geosteer.cli.common import (
    DEVICE_OPT,
    DTYPE_OPT,
    JSON_OPT,
    MODEL_OPT,
    THREADS_OPT,
    check_head_list,
    check_layers,
    check_positions,
    emit,
    load,
)
from geosteer.cli.outputs import out_file, out_records
from geosteer.directional.config import DEFAULT_VALUE_SPACE

directional_app = typer.Typer(add_completion=False, no_args_is_help=True,
                              help="Directional decomposition: component-scaling edits and studies.")


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


@directional_app.command("ppl", hidden=True)
def ppl_cmd(
    model: str = MODEL_OPT,
    site: str = typer.Option(..., "--site"),
    s_par: float = typer.Option(1.0, "--s-par"),
    s_perp: float = typer.Option(1.0, "--s-perp"),
    layers: str = typer.Option("all", "--layers"),
    tokens: int = typer.Option(2048, "--tokens", min=2),
    context: int = typer.Option(512, "--context"),
    stride: int = typer.Option(256, "--stride"),
    as_json: bool = JSON_OPT,
    heads: str = typer.Option("all", "--heads", help="value sites: query heads to edit ('all', '0-3', '0,5')"),
    value_space: str = typer.Option(DEFAULT_VALUE_SPACE, "--value-space", help="value sites: head | concat"),
    device: str = DEVICE_OPT, dtype: str = DTYPE_OPT,
) -> None:
    """Held-out perplexity with one component-scaling edit, beside the unedited baseline (an alias that goes:
    ``geosteer ppl --corpus heldout --set scale_site=... --set scale_par=...`` gives the same numbers)."""
    from geosteer.directional.config import ComponentScaleConfig, check_heads, parse_layers
    from geosteer.directional.sites import ComponentScale
    from geosteer.eval.perplexity import check_window, heldout_ids, strided_perplexity
    from geosteer.interventions import steer
    from geosteer.models.anatomy import anatomy

    cfg = ComponentScaleConfig(site, s_par, s_perp, heads=heads, value_space=value_space)
    check_layers(model, "--layers", layers)
    check_head_list(model, "--heads", heads)
    check_window(context, stride, prefix="--")
    check_positions(model, "--context", context)
    m, tok = load(model, device=device, dtype=dtype)
    cfg.layers = parse_layers(layers, anatomy(m).n_layers)
    check_heads(cfg.heads, anatomy(m).n_heads)
    ids = heldout_ids(tok, tokens)
    base = strided_perplexity(m, tok, ids=ids, context=context, stride=stride)
    with steer(m, ComponentScale.from_config(cfg)):
        edited = strided_perplexity(m, tok, ids=ids, context=context, stride=stride)
    emit({**cfg.to_dict(), "tokens": edited.tokens, "ppl_baseline": base.ppl, "ppl": edited.ppl,
          "delta_ppl": edited.ppl - base.ppl}, as_json)
    if heads == "all":
        typer.echo(f"note: the same numbers: geosteer ppl -m {model} --corpus heldout --max-tokens {tokens} "
                   f"--context {context} --stride {stride} --set scale_site={site} --set scale_par={s_par} "
                   f"--set scale_perp={s_perp} --set scale_layers={layers} --set scale_value_space={value_space} "
                   "(and without --set: the baseline); `directional ppl` will be removed", err=True)


def register(app: typer.Typer) -> None:
    """Add ``geosteer decompose`` and the ``geosteer directional`` sub-app (hidden: only old spellings are left
    there, the method's studies run as ``geosteer study directional <name>``)."""
    app.command("decompose")(decompose_cmd)
    app.add_typer(directional_app, name="directional", hidden=True)
