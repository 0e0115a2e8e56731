"""CLI: ``geosteer decompose`` (measurement) and ``geosteer directional …`` (edits, the sweep, pretraining).

The compression-error study runs as ``python studies/directional/compression.py``."""

from __future__ import annotations

from pathlib import Path

import typer

from geosteer.cli.common import (
    DEVICE_OPT,
    DTYPE_OPT,
    JSON_OPT,
    MAX_SEEDS,
    MODEL_OPT,
    THREADS_OPT,
    check_head_list,
    check_layers,
    check_positions,
    emit,
    load,
    set_threads,
)
from geosteer.cli.outputs import out_dir, out_file, out_records
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


def sweep_cmd(
    model: str = MODEL_OPT,
    sites: str = typer.Option("value_exclude_self,attn_out,mlp_out", "--sites",
                              help="comma-separated sweep sites"),
    controls: bool = typer.Option(True, "--controls/--no-controls",
                                  help="add value_full and diag_removal at s_par = 0"),
    value_space: str = typer.Option(DEFAULT_VALUE_SPACE, "--value-space",
                                    help="value sites: head | concat | head,concat (both, one baseline)"),
    par_grid: str = typer.Option("paper", "--s-par-grid",
                                 help="s∥ values (s⊥ = 1): paper (-2:3:0.25) | lo:hi:step | 0,0.5,2 | none"),
    perp_grid: str = typer.Option("paper", "--s-perp-grid",
                                  help="s⊥ values (s∥ = 1): paper (0:2:0.25) | lo:hi:step | 0,0.5 | none"),
    tokens: int = typer.Option(2048, "--tokens", min=2, help="held-out tokens scored"),
    context: int = typer.Option(512, "--context"),
    stride: int = typer.Option(256, "--stride"),
    out: Path = typer.Option(Path("sweep.json"), "--out", callback=out_records()),
    threads: int = THREADS_OPT,
    device: str = DEVICE_OPT, dtype: str = DTYPE_OPT,
) -> None:
    """Study 1: held-out strided perplexity vs s∥ (s⊥ = 1) and vs s⊥ (s∥ = 1) per site (paper Figure 3)."""
    from geosteer.directional.config import check_site
    from geosteer.directional.sweep import parse_grid, run_sweep, sweep_settings
    from geosteer.eval.perplexity import check_window, heldout_ids
    from geosteer.models.loading import model_id

    set_threads(threads)
    site_list = [check_site(s.strip()) for s in sites.split(",") if s.strip()]
    if not site_list:
        raise ValueError("--sites is empty: give comma-separated sweep sites")
    spaces = _value_spaces(value_space)
    pars, perps = parse_grid(par_grid, "--s-par-grid"), parse_grid(perp_grid, "--s-perp-grid")
    check_window(context, stride, prefix="--")
    check_positions(model, "--context", context)
    m, tok = load(model, threads=threads, device=device, dtype=dtype)
    settings = sweep_settings(site_list, pars, perps, spaces)
    if not controls:
        settings = [s for s in settings if s.site in site_list]
    ids = heldout_ids(tok, tokens)
    run_sweep(m, tok, ids, settings, out, context=context, stride=stride,
              meta={"model": model_id(m), "corpus": "heldout", "sites": site_list, "value_spaces": spaces})


def _value_spaces(spec: str) -> list[str]:
    """``--value-space head|concat|head,concat`` → the checked list (one line naming the valid ones)."""
    from geosteer.directional.config import check_value_space

    spaces = [check_value_space(v.strip()) for v in spec.split(",") if v.strip()]
    if not spaces or len(set(spaces)) != len(spaces):
        raise ValueError(f"--value-space {spec!r}: give head, concat or head,concat")
    return spaces


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


def pretrain_cmd(
    variants: str = typer.Option("baseline,attn_par,value_par", "--variants"),
    seeds: str = typer.Option("0,1", "--seed-list", help="comma-separated seeds, e.g. 0,1,2"),
    old_seeds: str = typer.Option(None, "--seeds", hidden=True, help="the old spelling of --seed-list"),
    steps: int = typer.Option(300, "--steps", min=1),
    batch: int = typer.Option(16, "--batch", min=1, max=4096),
    ctx: int = typer.Option(128, "--ctx", min=1, max=1 << 16, help="context length in bytes"),
    lr: float = typer.Option(3e-3, "--lr"),
    d_model: int = typer.Option(128, "--d-model", min=2, max=8192,
                                help="model width; heads = max(1, d_model // 32), each an even size"),
    n_layers: int = typer.Option(4, "--n-layers", min=1, max=256, help="depth of the model trained (blocks)"),
    old_layers: int | None = typer.Option(None, "--layers", min=1, max=256, hidden=True,
                                          help="the old spelling of --n-layers"),
    eval_every: int = typer.Option(25, "--eval-every", min=1),
    val_batches: int = typer.Option(16, "--val-batches", min=1, max=4096,
                                    help="fixed held-out batches for the val loss"),
    out_dir: Path = typer.Option(Path("."), "--out-dir", callback=out_dir()),
    threads: int = THREADS_OPT,
) -> None:
    """From-scratch byte-level models trained with the edit active: baseline vs attention / value parallel
    removal (study 3 of docs/directional.md)."""
    import warnings

    import torch

    from geosteer.directional.pretrain import VARIANTS, byte_ids, sample_batch, train_one
    from geosteer.errors import GeosteerError
    from geosteer.io_utils import write_records

    if old_layers is not None:  # --layers is a layer selection in every other verb
        warnings.warn("'--layers' (the depth) is deprecated here; use '--n-layers'", DeprecationWarning,
                      stacklevel=1)
        n_layers = old_layers
    if old_seeds is not None:  # --seeds is a count in every other verb
        warnings.warn("'--seeds' (a list) is deprecated here; use '--seed-list'", DeprecationWarning, stacklevel=1)
        seeds = old_seeds
    set_threads(threads)
    vs = [v.strip() for v in variants.split(",") if v.strip()]
    bad = [v for v in vs if v not in VARIANTS]
    if bad:
        raise GeosteerError(f"unknown variant '{bad[0]}'; valid: {', '.join(VARIANTS)}")
    seed_list = _parse_seeds(seeds)
    if not vs:
        raise GeosteerError(f"--variants is empty; valid: {', '.join(VARIANTS)}")
    if not lr > 0:
        raise GeosteerError(f"--lr must be > 0 (got {lr})")
    heads = max(1, d_model // 32)
    if d_model % (2 * heads):
        raise GeosteerError(f"--d-model {d_model} splits into {heads} head(s) of odd or fractional size; use a "
                            "width whose heads (d_model // 32 of them) are an even size, e.g. 64, 128, 256")
    train = byte_ids("train", max_chars=4_000_000)
    held = byte_ids("heldout")
    g = torch.Generator().manual_seed(12345)
    vals = [sample_batch(held, g, batch, ctx) for _ in range(val_batches)]
    model_kw = {"d_model": d_model, "layers": n_layers, "heads": heads, "ffn": 3 * d_model}
    curves, finals = [], []
    meta = {"steps": steps, "batch": batch, "ctx": ctx, "lr": lr, "model": model_kw, "tokenizer": "bytes",
            "train_bytes": int(len(train)), "val_tokens": val_batches * batch * ctx}
    for seed in seed_list:
        for v in vs:
            res = train_one(v, seed, train, vals, steps=steps, batch=batch, ctx=ctx, lr=lr,
                            eval_every=eval_every, model_kw=model_kw)
            curves += res["curve"]
            finals.append({"variant": v, "seed": seed, "final_val_loss": res["final_val"],
                           "params": res["params"], "seconds": round(res["seconds"], 1)})
            write_records(out_dir / "pretrain_curves.csv", curves)
            write_records(out_dir / "pretrain_final.json", finals, meta)


def _parse_seeds(spec: str) -> list[int]:
    from geosteer.errors import GeosteerError

    try:
        seeds = [int(s) for s in spec.split(",") if s.strip()]
    except ValueError:
        raise GeosteerError(f"bad --seed-list {spec!r}: comma-separated whole numbers, e.g. 0,1,2") from None
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0 or len(seeds) > MAX_SEEDS:
        raise GeosteerError(f"bad --seed-list {spec!r}: give 1 to {MAX_SEEDS} different seeds >= 0, e.g. 0,1,2")
    return seeds


def register(app: typer.Typer) -> None:
    """Add ``geosteer decompose`` and the ``geosteer directional`` sub-app (hidden: only old spellings are left
    there, the method's studies run as ``geosteer study directional <name>``)."""
    app.command("decompose")(decompose_cmd)
    app.add_typer(directional_app, name="directional", hidden=True)
