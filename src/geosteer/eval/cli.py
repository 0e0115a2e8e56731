"""Core evaluation verbs: ``ppl``, ``generate``, ``compare``."""

from __future__ import annotations

import math
from pathlib import Path

import typer

from geosteer.cli.common import (
    BASE_MODEL_OPT,
    CHAT_OPT,
    DEVICE_OPT,
    DTYPE_OPT,
    FORCE_OPT,
    JSON_OPT,
    MAX_SEEDS,
    MODEL_OPT,
    SYSTEM_OPT,
    THREADS_OPT,
    check_positions,
    emit,
    load,
)
from geosteer.cli.outputs import out_records
from geosteer.cli.recipe import RECIPE_OPT, SET_OPT, SURFACES_OPT, spec_from_options
from geosteer.errors import GeosteerError
from geosteer.eval.chat import check_chat_options, format_prompts

BOS_OPT = typer.Option(False, "--bos", help="put the BOS token first (default: encode as the model's "
                                            "tokenizer does, with its own BOS convention)")


_PROMPTS_SHAPE = 'a list of strings, or {"prompts": [...]} whose items are strings or {"prompt"|"text": ...}'


def _read_prompts(prompts: list[str] | None, prompts_file: Path | None) -> list[str]:
    out = list(prompts or [])
    if "" in out:
        raise GeosteerError(f"--prompt is empty (prompt {out.index('') + 1} of {len(out)}); give the text to continue")
    if prompts_file is not None:
        from geosteer.eval.textfile import read_text_file

        text = read_text_file(prompts_file)
        if prompts_file.suffix == ".json":
            from geosteer.readers import ReadRefused, parse_json

            try:  # nesting-capped, no lone surrogates
                data = parse_json(text, prompts_file, what="prompts file")
            except ReadRefused as e:
                raise GeosteerError(f"{e}; expected {_PROMPTS_SHAPE}") from None
            items = data.get("prompts") if isinstance(data, dict) else data
            if not isinstance(items, list):
                raise GeosteerError(f"prompts file {prompts_file} holds no list of prompts; expected "
                                    f"{_PROMPTS_SHAPE}")
            for i, p in enumerate(items):
                if isinstance(p, dict):
                    p = p.get("prompt", p.get("text"))
                if not isinstance(p, str) or not p.strip():
                    raise GeosteerError(f"prompts file {prompts_file}: item {i} is not a non-empty prompt "
                                        f"string; expected {_PROMPTS_SHAPE}")
                out.append(p)
        else:
            out += [line.strip() for line in text.splitlines() if line.strip()]
    if not out:
        raise GeosteerError("no prompts: give --prompt (repeatable) or --prompts-file")
    return out


def _check_sampling(temperature: float, top_k: int) -> None:
    if not math.isfinite(temperature) or temperature < 0:
        raise GeosteerError(f"--temperature must be a finite number >= 0 (got {temperature}); 0 means greedy")
    if top_k < 0:
        raise GeosteerError(f"--top-k must be >= 0 (got {top_k}); 0 keeps every token")


WINDOWS = ("strided", "independent")


def _check_windows(windows: str, corpus: str | None, max_tokens: int | None) -> None:
    if windows not in WINDOWS:
        raise GeosteerError(f"--windows {windows}: valid: {', '.join(WINDOWS)}")
    if windows == "independent" and (corpus is None or max_tokens is None):
        raise GeosteerError("--windows independent cuts a corpus split into windows: give --corpus "
                            "heldout|train and --max-tokens N (the total; N // --context windows)")


def _independent_windows(m, tok, interventions: list, split: str, context: int, max_tokens: int,
                         batch_size: int) -> dict:
    """Mean NLL over independent BOS-first windows (:mod:`geosteer.eval.windows`), as the dynamics verbs."""
    from geosteer.eval.windows import corpus_windows, mean_loss

    ids = corpus_windows(tok, split, max_tokens, context)
    nll = mean_loss(m, ids, batch_size, interventions)
    return {"ppl": math.exp(nll), "nll": nll, "tokens": int(ids[:, 1:].numel()), "context": context,
            "windows": int(ids.shape[0]), "protocol": "independent"}


def ppl(
    model: str = MODEL_OPT,
    text_file: Path | None = typer.Option(None, "--text-file", help="UTF-8 text file to score"),
    corpus: str | None = typer.Option(None, "--corpus", help="bundled corpus split: heldout | train"),
    context: int = typer.Option(512, help="window length in tokens"),
    stride: int = typer.Option(256, help="window start spacing in tokens"),
    max_tokens: int | None = typer.Option(None, help="score only the first N tokens"),
    batch_size: int = typer.Option(4, help="windows per forward pass"),
    windows: str = typer.Option("strided", "--windows", help="strided (sliding windows, each token scored "
                                "once) | independent (the corpus cut into --context-token windows, BOS first "
                                "in each, scored whole: the protocol of the dynamics verbs)"),
    bos: bool = BOS_OPT,
    surfaces: Path | None = SURFACES_OPT,
    recipe: str | None = RECIPE_OPT,
    settings: list[str] | None = SET_OPT,
    force: bool = FORCE_OPT,
    base_model: str | None = BASE_MODEL_OPT,
    threads: int = THREADS_OPT,
    device: str = DEVICE_OPT,
    dtype: str = DTYPE_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Strided sliding-window perplexity (and bits per byte) of a text file or corpus split.

    A text file is read and tokenised incrementally, only as far as --max-tokens needs."""
    from geosteer.data.corpus import split_text
    from geosteer.eval.perplexity import check_window, strided_perplexity
    from geosteer.eval.textfile import encode_file
    from geosteer.interventions import steer

    if (text_file is None) == (corpus is None):
        raise GeosteerError("give exactly one of --text-file F or --corpus heldout|train")
    _check_windows(windows, corpus, max_tokens)
    if windows == "strided":
        check_window(context, stride, prefix="--")
    if batch_size < 1:
        raise GeosteerError(f"--batch-size must be >= 1 (got {batch_size})")
    if max_tokens is not None and max_tokens < 2:
        raise GeosteerError(f"--max-tokens must be >= 2 (got {max_tokens})")
    if text_file is not None:
        from geosteer.eval.textfile import check_text_file

        check_text_file(text_file, "--text-file")
    check_positions(model, "--context", context)
    text = None if text_file else split_text(corpus)
    spec = spec_from_options(recipe, settings, surfaces, model=model, force=force,
                             base_model=base_model)  # checked before the model loads
    m, tok = load(model, threads=threads, device=device, dtype=dtype, base_model=base_model)
    add_bos = True if bos else None
    ids = encode_file(tok, text_file, max_tokens=max_tokens, add_bos=add_bos) if text_file is not None else None
    if windows == "independent":
        emit(_independent_windows(m, tok, spec.build(m, force=force), corpus, context, max_tokens,
                                  batch_size), as_json)
        return
    with steer(m, *spec.build(m, force=force)):
        res = strided_perplexity(m, tok, text, ids=ids, context=context, stride=stride,
                                 max_tokens=max_tokens, batch_size=batch_size, require_full_window=True,
                                 add_bos=add_bos,
                                 progress=not as_json)
    d = res.to_dict()
    emit(d if not as_json else {k: d[k] for k in ("ppl", "nll", "tokens", "bits_per_byte")} | d, as_json)


def generate_cmd(
    model: str = MODEL_OPT,
    prompt: list[str] = typer.Option(..., "--prompt", "-p", help="the text to continue (repeatable: each "
                                     "prompt is continued in turn)"),
    max_new_tokens: int = typer.Option(50),
    greedy: bool = typer.Option(True, "--greedy/--sample", help="greedy (default) or sampling"),
    temperature: float | None = typer.Option(None, help="sampling temperature > 0 (implies --sample); "
                                             "0 means greedy"),
    top_k: int = typer.Option(50),
    seed: int = typer.Option(0),
    bos: bool = BOS_OPT,
    chat: bool = CHAT_OPT,
    system: str | None = SYSTEM_OPT,
    surfaces: Path | None = SURFACES_OPT,
    recipe: str | None = RECIPE_OPT,
    settings: list[str] | None = SET_OPT,
    force: bool = FORCE_OPT,
    base_model: str | None = BASE_MODEL_OPT,
    threads: int = THREADS_OPT,
    device: str = DEVICE_OPT,
    dtype: str = DTYPE_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Continue a prompt, or each of several (greedy, or sampling with a seed).

    --max-new-tokens beyond the model's positions is capped at what fits (with a note on stderr). Several
    --prompt options print one row each (--json: a list)."""
    from geosteer.eval.generation import cap_new_tokens, generate, prompt_ids
    from geosteer.interventions import steer

    prompts = _read_prompts(prompt, None)
    if max_new_tokens < 1:
        raise GeosteerError(f"max_new_tokens (--max-new-tokens) must be >= 1 (got {max_new_tokens})")
    if temperature is not None:
        _check_sampling(temperature, top_k)
        greedy = temperature == 0  # T = 0 is the limit of sampling: greedy decoding
    elif top_k < 0:
        _check_sampling(1.0, top_k)
    check_chat_options(chat, system)
    spec = spec_from_options(recipe, settings, surfaces, model=model, force=force,
                             base_model=base_model)  # checked before the model loads
    m, tok = load(model, threads=threads, device=device, dtype=dtype, base_model=base_model)
    add_bos = True if bos else None
    shown, prompts = prompts, format_prompts(tok, prompts, chat, system, add_bos)
    longest = max(prompt_ids(tok, p, add_bos).shape[1] for p in prompts)
    max_new_tokens, note = cap_new_tokens(m, longest, max_new_tokens)
    if note:
        typer.echo(f"note: {note}" + (" (longest prompt)" if len(prompts) > 1 else ""), err=True)
    rows = []
    with steer(m, *spec.build(m, force=force)):
        for text, formatted in zip(shown, prompts, strict=True):
            res = generate(m, tok, formatted, max_new_tokens, greedy=greedy,
                           temperature=1.0 if temperature is None or greedy else temperature,
                           top_k=top_k, seed=seed, add_bos=add_bos)
            rows.append(res.to_dict() if as_json else {"prompt": text, "continuation": res.text})
    emit(rows[0] if len(rows) == 1 else rows, as_json)


def compare(
    model: str = MODEL_OPT,
    prompt: list[str] | None = typer.Option(None, "--prompt", "-p", help="repeatable"),
    prompts_file: Path | None = typer.Option(None, "--prompts-file", help=".txt (one per line) or .json"),
    max_new_tokens: int = typer.Option(30),
    seeds: int = typer.Option(0, max=MAX_SEEDS, help="paired-seed samples per prompt (same seed for both "
                              "states)"),
    temperature: float = typer.Option(0.8),
    top_k: int = typer.Option(50),
    bos: bool = BOS_OPT,
    chat: bool = CHAT_OPT,
    system: str | None = SYSTEM_OPT,
    surfaces: Path | None = SURFACES_OPT,
    recipe: str | None = RECIPE_OPT,
    settings: list[str] | None = SET_OPT,
    force: bool = FORCE_OPT,
    base_model: str | None = BASE_MODEL_OPT,
    out: Path | None = typer.Option(None, "--out", help="write tidy rows (.json or .csv)",
                                    callback=out_records()),
    threads: int = THREADS_OPT,
    device: str = DEVICE_OPT,
    dtype: str = DTYPE_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Stock model (a) vs the model with the given interventions (b) on a prompt set."""
    from geosteer.eval.compare import compare_states, summarize
    from geosteer.eval.generation import cap_new_tokens, prompt_ids
    from geosteer.io_utils import write_records

    if max_new_tokens < 1:
        raise GeosteerError(f"max_new_tokens (--max-new-tokens) must be >= 1 (got {max_new_tokens})")
    if seeds < 0:
        raise GeosteerError(f"--seeds must be >= 0 (got {seeds})")
    _check_sampling(temperature, top_k)
    if seeds and temperature == 0:
        raise GeosteerError("--temperature 0 with --seeds: seeded samples at T = 0 are the greedy "
                            "continuation, which compare always reports; give T > 0 or --seeds 0")
    prompts = _read_prompts(prompt, prompts_file)
    check_chat_options(chat, system)
    spec = spec_from_options(recipe, settings, surfaces, model=model, force=force,
                             base_model=base_model)  # checked before the model loads
    m, tok = load(model, threads=threads, device=device, dtype=dtype, base_model=base_model)
    add_bos = True if bos else None
    shown, prompts = prompts, format_prompts(tok, prompts, chat, system, add_bos)
    longest = max(prompt_ids(tok, p, add_bos).shape[1] for p in prompts)
    max_new_tokens, note = cap_new_tokens(m, longest, max_new_tokens)
    if note:
        typer.echo(f"note: {note} (longest prompt)", err=True)
    b = spec.build(m, force=force)
    if not b:
        typer.echo("note: no intervention given; both states are the stock model", err=True)
    rows = compare_states(m, tok, prompts, [], b, max_new_tokens=max_new_tokens,
                          sample_seeds=range(seeds), temperature=temperature, top_k=top_k, add_bos=add_bos)
    for r, p in zip(rows, shown, strict=True):
        r["prompt"] = p  # as given (the model saw it through the chat template with --chat)
    summary = summarize(rows)
    if out is not None:
        write_records(out, rows, meta={"model": model, "surfaces": str(surfaces) if surfaces else None,
                                       "recipe": spec.changed(),
                                       "summary": summary})
    if as_json:
        emit({"summary": summary, "rows": rows}, True)
    else:
        emit([{k: r[k] for k in ("prompt", "greedy_changed", "first_divergence", "kl")} for r in rows],
             False, table_title="stock vs intervened")
        for r in rows:  # the continuations themselves (greedy), stock then intervened
            typer.echo(f"\nprompt: {r['prompt']}\n  stock:      {r['text_a']!r}\n  intervened: {r['text_b']!r}")
        typer.echo("")
        emit(summary, False)


def register(app: typer.Typer) -> None:
    app.command("ppl")(ppl)
    app.command("generate")(generate_cmd)
    app.command("compare")(compare)
