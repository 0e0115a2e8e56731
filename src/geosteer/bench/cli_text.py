"""``geosteer bench text``: does steering keep text good? Repeated 4-grams, the benchmark's fluency score and
held-out perplexity, stock model against surfaces at chosen strengths, on everyday prompts."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import typer

from geosteer.cli.common import CHAT_OPT, DEVICE_OPT, DTYPE_OPT, MODEL_OPT, SYSTEM_OPT, THREADS_OPT, emit, load
from geosteer.cli.outputs import out_records
from geosteer.cli.preflight import check_artifact
from geosteer.errors import GeosteerError


def parse_strengths(spec: str) -> list[float]:
    """``--strengths 0.5,1``: finite numbers > 0, each once."""
    try:
        vals = [float(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        raise GeosteerError(f"--strengths {spec!r}: give comma-separated numbers > 0, e.g. 0.5,1") from None
    if not vals or any(not math.isfinite(v) or v <= 0 for v in vals) or len(set(vals)) != len(vals):
        raise GeosteerError(f"--strengths {spec!r}: give distinct comma-separated numbers > 0, e.g. 0.5,1")
    return vals


def _check_surfaces(refs: list[Path], grid: list[float]) -> list[str]:
    """The surfaces' folders; a missing or damaged artifact, or one with exact walls (on or off: strength 1
    only) at another strength, is one line before the model loads."""
    from geosteer.manifold import read_config
    from geosteer.shipped import expand

    out = []
    for ref in refs:
        path = expand(str(ref))
        walls = read_config(path).get("walls") or []
        other = [s for s in grid if s != 1]
        if walls and other:
            raise GeosteerError(f"--surfaces {ref}: these surfaces carry {len(walls)} exact wall(s), which are on "
                                f"or off, so they have no strength {other[0]:g}; give --strengths 1")
        out.append(str(path))
    return out


def text_cmd(
    surfaces: list[Path] = typer.Option([], "--surfaces", "-s", help="surfaces artifact (folder or shipped name, "
                                       "e.g. smollm2-surfaces-all); repeatable"),
    model: str = MODEL_OPT,
    strengths: str = typer.Option("1", "--strengths", help="each surfaces artifact at these strengths "
                                  "(coefficients × s), comma-separated"),
    new_tokens: int = typer.Option(48, "--new-tokens", help="greedy tokens per continuation"),
    ppl_tokens: int = typer.Option(4096, "--ppl-tokens", help="held-out tokens for the perplexity (0: none)"),
    chat: bool = CHAT_OPT,
    system: str | None = SYSTEM_OPT,
    seed: int = typer.Option(0, "--seed", help="seed of the bootstrap intervals"),
    out: Path | None = typer.Option(None, "--out", help="write the rows (.json or .csv)", callback=out_records()),
    device: str = DEVICE_OPT, dtype: str = DTYPE_OPT, threads: int = THREADS_OPT,
) -> None:
    """Continuation quality of the stock model and each surfaces artifact.

    Greedy continuations of twenty everyday prompts by the stock model and by each surfaces artifact at each
    strength: share of repeated 4-grams, the steering benchmark's fluency score (against the stock model's
    own continuations) and held-out perplexity, with 95 % intervals over prompts."""
    from geosteer.bench.text_quality import State, everyday_prompts, measure_states
    from geosteer.eval.chat import check_chat_options, format_prompts
    from geosteer.io_utils import write_records
    from geosteer.recipe import InterventionSpec

    check_chat_options(chat, system)
    if new_tokens < 4:
        raise GeosteerError(f"--new-tokens must be >= 4 (a 4-gram needs 4 tokens; got {new_tokens})")
    if ppl_tokens < 0 or 0 < ppl_tokens < 513:
        raise GeosteerError(f"--ppl-tokens must be 0 (no perplexity) or more than one 512-token window "
                            f"(got {ppl_tokens})")
    if seed < 0:  # the bootstrap's generator takes none: refused now, not after every continuation
        raise GeosteerError(f"--seed must be >= 0 (got {seed})")
    from geosteer.models.limits import check_positions, config_of

    check_positions(config_of(model), new_tokens, "--new-tokens")  # a prompt and its continuation must fit
    grid = parse_strengths(strengths)
    paths = _check_surfaces(surfaces, grid)
    for path in paths:  # another base model's or another shape's surfaces: refused before the model loads
        check_artifact("surfaces", path, model)
    m, tok = load(model, threads=threads, device=device, dtype=dtype)
    prompts = format_prompts(tok, list(everyday_prompts()), chat, system, True)  # encoded BOS first
    states = [State("stock", [], 0.0)]
    for ref, path in zip(surfaces, paths, strict=True):  # the recipe of the surfaces at each strength, built now
        states += [State(str(ref), InterventionSpec(surfaces=path, surfaces_strength=s).build(m), s) for s in grid]
    rows = measure_states(m, tok, states, prompts, new_tokens, ppl_tokens, seed,
                          log=lambda s: typer.echo(s, err=True))
    meta = {"command": "geosteer " + " ".join(sys.argv[1:]), "model": model, "chat": chat, "system": system,
            "new_tokens": new_tokens, "ppl_tokens": ppl_tokens, "n_prompts": len(prompts),
            "measures": "repeated-4-gram share and fluency score (the stock model reads each continuation)"}
    if out is not None:
        write_records(out, rows, meta=meta)
    emit([_flat(r) for r in rows], False, table_title="text quality (means over prompts, 95 % intervals)")


def _flat(r: dict) -> dict:
    def ci(d: dict) -> str:
        return f"{d['mean']:.3f} [{d['lo']:.3f}, {d['hi']:.3f}]"
    row = {"state": r["state"], "strength": r["strength"], "repeated 4-grams": ci(r["repeated_4gram_share"]),
           "fluency score": ci(r["fluency_score"]), "stock log-prob": f"{r['logprob']['mean']:.3f}"}
    if "heldout_ppl" in r:
        row["held-out ppl"] = f"{r['heldout_ppl']:.3f}"
    return row
