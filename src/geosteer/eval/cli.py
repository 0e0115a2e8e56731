"""Core evaluation verbs: ``ppl``, ``generate``, ``compare``."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from geosteer.errors import GeosteerError


def _read_text_file(path: Path) -> str:
    if not path.exists():
        raise GeosteerError(f"text file not found: {path}")
    if not path.is_file():
        raise GeosteerError(f"not a file: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise GeosteerError(f"cannot read {path} as UTF-8 text ({type(e).__name__})") from None
    if not text.strip():
        raise GeosteerError(f"text file is empty: {path}")
    return text


def _read_prompts(prompts: list[str] | None, prompts_file: Path | None) -> list[str]:
    out = list(prompts or [])
    if prompts_file is not None:
        text = _read_text_file(prompts_file)
        if prompts_file.suffix == ".json":
            data = json.loads(text)
            items = data.get("prompts", data) if isinstance(data, dict) else data
            out += [p["prompt"] if isinstance(p, dict) else str(p) for p in items]
        else:
            out += [line.strip() for line in text.splitlines() if line.strip()]
    if not out:
        raise GeosteerError("no prompts: give --prompt (repeatable) or --prompts-file")
    return out


def register(app: typer.Typer) -> None:
    from geosteer.cli import MODEL_OPT, emit, interventions_from_options

    surfaces_opt = typer.Option(None, "--surfaces", help="attention-manifold artifact folder to attach")

    @app.command()
    def ppl(
        model: str = MODEL_OPT,
        text_file: Path | None = typer.Option(None, "--text-file", help="UTF-8 text file to score"),
        corpus: str | None = typer.Option(None, "--corpus", help="bundled corpus split: heldout | train"),
        context: int = typer.Option(512, help="window length in tokens"),
        stride: int = typer.Option(256, help="window start spacing in tokens"),
        max_tokens: int | None = typer.Option(None, help="score only the first N tokens"),
        batch_size: int = typer.Option(4, help="windows per forward pass"),
        surfaces: Path | None = surfaces_opt,
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """Strided sliding-window perplexity (and bits per byte) of a text file or corpus split."""
        from geosteer import load_model
        from geosteer.data.corpus import split_text
        from geosteer.eval.perplexity import strided_perplexity
        from geosteer.steer import steer

        if (text_file is None) == (corpus is None):
            raise GeosteerError("give exactly one of --text-file F or --corpus heldout|train")
        if stride <= 0:
            raise GeosteerError(f"--stride must be > 0 (got {stride})")
        if context < stride:
            raise GeosteerError(f"--context ({context}) must be >= --stride ({stride})")
        text = _read_text_file(text_file) if text_file else split_text(corpus)
        m, tok = load_model(model)
        with steer(m, *interventions_from_options(m, surfaces)):
            res = strided_perplexity(m, tok, text, context=context, stride=stride, max_tokens=max_tokens,
                                     batch_size=batch_size, require_full_window=True, progress=not as_json)
        d = res.to_dict()
        emit(d if not as_json else {k: d[k] for k in ("ppl", "nll", "tokens", "bits_per_byte")} | d, as_json)

    @app.command("generate")
    def generate_cmd(
        model: str = MODEL_OPT,
        prompt: str = typer.Option(..., "--prompt", "-p"),
        max_new_tokens: int = typer.Option(50),
        greedy: bool = typer.Option(True, "--greedy/--sample", help="greedy (default) or sampling"),
        temperature: float | None = typer.Option(None, help="sampling temperature (implies --sample)"),
        top_k: int = typer.Option(50),
        seed: int = typer.Option(0),
        surfaces: Path | None = surfaces_opt,
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """Continue a prompt (greedy, or sampling with a seed)."""
        from geosteer import load_model
        from geosteer.eval.generation import generate
        from geosteer.steer import steer

        if temperature is not None:
            greedy = False
        m, tok = load_model(model)
        with steer(m, *interventions_from_options(m, surfaces)):
            res = generate(m, tok, prompt, max_new_tokens, greedy=greedy, temperature=temperature or 1.0,
                           top_k=top_k, seed=seed)
        emit(res.to_dict() if as_json else {"prompt": prompt, "continuation": res.text}, as_json)

    @app.command()
    def compare(
        model: str = MODEL_OPT,
        prompt: list[str] | None = typer.Option(None, "--prompt", "-p", help="repeatable"),
        prompts_file: Path | None = typer.Option(None, "--prompts-file", help=".txt (one per line) or .json"),
        max_new_tokens: int = typer.Option(30),
        seeds: int = typer.Option(0, help="paired-seed samples per prompt (same seed for both states)"),
        temperature: float = typer.Option(0.8),
        top_k: int = typer.Option(50),
        surfaces: Path | None = surfaces_opt,
        out: Path | None = typer.Option(None, "--out", help="write tidy rows (.json or .csv)"),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """Stock model (a) vs the model with the given interventions (b) on a prompt set."""
        from geosteer import load_model
        from geosteer.eval.compare import compare_states, summarize
        from geosteer.io_utils import write_records

        prompts = _read_prompts(prompt, prompts_file)
        m, tok = load_model(model)
        b = interventions_from_options(m, surfaces)
        if not b:
            typer.echo("note: no intervention given; both states are the stock model", err=True)
        rows = compare_states(m, tok, prompts, [], b, max_new_tokens=max_new_tokens,
                              sample_seeds=range(seeds), temperature=temperature, top_k=top_k)
        summary = summarize(rows)
        if out is not None:
            write_records(out, rows, meta={"model": model, "surfaces": str(surfaces) if surfaces else None,
                                           "summary": summary})
        if as_json:
            emit({"summary": summary, "rows": rows}, True)
        else:
            emit([{k: r[k] for k in ("prompt", "greedy_changed", "first_divergence", "kl")} for r in rows],
                 False, table_title="stock vs intervened")
            emit(summary, False)
