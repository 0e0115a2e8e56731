"""``geosteer study dynamics prefix-spread | anchors | edit-specificity | edit-linearity | edit-locality``
(paper App. C.5, Fig. 13).

Definitions in :mod:`geosteer_paper.dynamics.prefix` and :mod:`geosteer_paper.dynamics.editing`. Tidy records via
``--out`` (.json/.csv) / ``--csv``; docs/dynamics-prefix.md quotes them."""

from __future__ import annotations

from pathlib import Path

import typer

from geosteer.cli.common import DEVICE_OPT, DTYPE_OPT, JSON_OPT, MAX_SEEDS, MODEL_OPT, THREADS_OPT, emit
from geosteer.models.anatomy import anatomy, parse_layers
from geosteer_paper.dynamics.studies.common import (
    CSV_OPT,
    OUT_OPT,
    check_choices,
    run_meta,
    setup_model,
    setup_windows,
    write_rows,
    write_summary,
)

PREFIX_FILE_OPT = typer.Option(None, "--prefix-file",
                               help="one prefix per line (default: held-out corpus windows)")
N_PREFIX_OPT = typer.Option(16, "--prefixes", help="corpus prefixes (without --prefix-file)")
PREFIX_LEN_OPT = typer.Option(32, "--prefix-len", help="tokens per corpus prefix")
SUFFIX = "In short, the most important thing to remember is that"
SUFFIX_OPT = typer.Option(SUFFIX, "--suffix", help="the fixed suffix (text)")


def _encode(tok, text: str):
    import torch

    return torch.tensor(tok(text, add_special_tokens=False)["input_ids"], dtype=torch.long)


def _prefix_lines(prefix_file: Path | None, n: int, plen: int) -> list[str] | None:
    """The prefix file's non-blank lines (checked before the model loads), or None for corpus prefixes."""
    from geosteer.errors import GeosteerError
    from geosteer_paper.dynamics.prefix import check_positive

    if prefix_file is None:
        check_positive(n, "--prefixes")
        check_positive(plen, "--prefix-len")
        return None
    from geosteer.readers import ReadRefused, read_text

    try:
        lines = [ln for ln in read_text(prefix_file, what="prefix file").splitlines() if ln.strip()]
    except ReadRefused as e:
        raise GeosteerError(f"cannot read {e}") from None
    if len(lines) < 2:
        raise GeosteerError(f"prefix file {prefix_file} needs at least 2 non-blank lines (got {len(lines)})")
    return lines


def _prefixes(tok, lines: list[str] | None, n: int, plen: int) -> list:
    """Token prefixes: the file's lines, or ``n`` held-out windows of ``plen`` tokens (no BOS)."""
    if lines is not None:
        return [_encode(tok, ln) for ln in lines]
    return _windows(tok, "heldout", n, plen)


def _windows(tok, split: str, n: int, length: int) -> list:
    from geosteer.dynamics.diagnostics import corpus_windows

    bos = getattr(tok, "bos_token_id", None)
    w = corpus_windows(tok, split, n * (length + 1), length + 1)
    return list(w[:, 1:] if bos is not None else w[:, :-1])


def prefix_spread(model: str = MODEL_OPT, prefix_file: Path | None = PREFIX_FILE_OPT,
                  prefixes: int = N_PREFIX_OPT, prefix_len: int = PREFIX_LEN_OPT, suffix: str = SUFFIX_OPT,
                  control: bool = typer.Option(True, "--control/--no-control",
                                               help="also the spread of unrelated train-split contexts"),
                  as_json: bool = JSON_OPT, out: Path | None = OUT_OPT, csv: Path | None = CSV_OPT,
                  threads: int = THREADS_OPT,
                  device: str = DEVICE_OPT, dtype: str = DTYPE_OPT) -> None:
    """Fixed suffix, varied prefixes: angular spread of the last-token residual direction per layer."""
    from geosteer.errors import GeosteerError
    from geosteer_paper.dynamics.prefix import contexts
    from geosteer_paper.dynamics.prefix import prefix_spread as run

    if not suffix.strip():
        raise GeosteerError("--suffix is empty: give the fixed text that follows every prefix")
    lines = _prefix_lines(prefix_file, prefixes, prefix_len)
    m, tok = setup_model(model, threads, device, dtype, seq_len=prefix_len + 1, seq_opt="--prefix-len")
    pre = _prefixes(tok, lines, prefixes, prefix_len)
    suf = _encode(tok, suffix)
    bos = getattr(tok, "bos_token_id", None)
    ctx = contexts(pre, suf, bos)
    ctl = None
    if control:
        import torch

        length = max(len(c) for c in ctx)
        ctl = [torch.cat([c[:1], w[: length - 1]]) if bos is not None else w[:length]
               for c, w in zip(ctx, _windows(tok, "train", len(ctx), length), strict=True)]
    rows = run(m, pre, suf, bos, control=ctl)
    meta = run_meta(m, prefixes=len(pre), prefix_file=str(prefix_file) if prefix_file else None,
                 prefix_len=prefix_len if prefix_file is None else None, suffix=suffix, suffix_tokens=len(suf),
                 bos=bos is not None, control=control, state="resid_post, last position")
    write_rows(rows, meta, out, csv)
    emit({"meta": meta, "layers": rows} if as_json else rows, as_json, table_title="prefix spread (deg)")


def anchors(model: str = MODEL_OPT, prefix_file: Path | None = PREFIX_FILE_OPT,
            prefixes: int = N_PREFIX_OPT, prefix_len: int = PREFIX_LEN_OPT, suffix: str = SUFFIX_OPT,
            k: int = typer.Option(2, "--k", "-k", help="prefix tokens replaced"),
            seeds: int = typer.Option(3, "--seeds", max=MAX_SEEDS,
                                      help="seeds 0..N-1 (replacement tokens, random positions)"),
            score_layers: str = typer.Option("all", "--score-layers", help="layers summed in the anchor score"),
            score: str = typer.Option("raw", "--score", help="raw: Σ‖P_uΦ‖; relative: Σ‖P_uΦ‖/‖x‖"),
            pool: str = typer.Option("corpus", "--pool",
                                     help="replacement tokens: corpus (train-split unigram) | vocab (uniform)"),
            exclude_anchors: bool = typer.Option(False, "--exclude-anchors/--uniform-random",
                                                 help="random positions avoid the anchors"),
            as_json: bool = JSON_OPT, out: Path | None = OUT_OPT, csv: Path | None = CSV_OPT,
            threads: int = THREADS_OPT,
            device: str = DEVICE_OPT, dtype: str = DTYPE_OPT) -> None:
    """Replace the k prefix tokens of largest ‖P_uΦ‖ vs k random ones: downstream last-token angular shift."""
    import torch

    from geosteer.errors import GeosteerError
    from geosteer_paper.dynamics.prefix import SCORES, anchor_study, check_positive

    check_positive(k, "--k")
    check_positive(seeds, "--seeds")
    if prefix_file is None and k > prefix_len - (k if exclude_anchors else 0):
        raise GeosteerError(f"--k {k} is too large for prefixes of {prefix_len} tokens (--prefix-len)")
    if pool not in ("corpus", "vocab"):
        raise GeosteerError(f"unknown pool '{pool}'; valid: corpus, vocab")
    check_choices(score, SCORES, "anchor score (--score)")
    if not suffix.strip():
        raise GeosteerError("--suffix is empty: give the fixed text that follows every prefix")
    lines = _prefix_lines(prefix_file, prefixes, prefix_len)
    m, tok = setup_model(model, threads, device, dtype, seq_len=prefix_len + 1, seq_opt="--prefix-len",
                    layers=score_layers, layers_opt="--score-layers")
    layers = anatomy(m).check_layers(parse_layers(score_layers, anatomy(m).n_layers))
    pre = _prefixes(tok, lines, prefixes, prefix_len)
    shortest = min(len(p) for p in pre)
    pre = [p[len(p) - shortest:] for p in pre]  # one length: keep the tokens nearest the suffix
    if pool == "corpus":
        ids = torch.cat(_windows(tok, "train", 16, 256))
    else:
        special = set(getattr(tok, "all_special_ids", []) or [])
        ids = torch.tensor([i for i in range(m.get_output_embeddings().weight.shape[0]) if i not in special])
    recs, summ, pos = anchor_study(m, pre, _encode(tok, suffix), getattr(tok, "bos_token_id", None), k,
                              list(range(seeds)), ids, layers, score, exclude_anchors)
    meta = run_meta(m, prefixes=len(pre), prefix_tokens=shortest, suffix=suffix, k=k, seeds=seeds,
                 score_layers=score_layers, score=score, pool=pool, exclude_anchors=exclude_anchors,
                 state="resid_post, last position")
    write_summary(summ, {"pairs": recs, "positions": pos}, meta, out, csv, as_json, "anchor vs random shift (deg)")


def _edit_inputs(model: str, layers: str, seeds: int, prompts: int, other: int, seq_len: int, threads: int,
                 device: str, dtype: str, *, kinds: str | None, direction: str, target_rank: int):
    """Shared set-up of the editing verbs: check the counts and the target rank, load the model, parse the
    layers and take ``prompts + other`` held-out windows of ``seq_len`` tokens. Returns (model, layers, windows)."""
    from geosteer.cli.common import check_token_rank
    from geosteer_paper.dynamics.prefix import DIRECTIONS, EDIT_KINDS, check_positive

    check_token_rank(model, "--target-rank", target_rank)
    check_positive(seeds, "--seeds")
    check_positive(prompts, "--prompts")
    if kinds is not None:
        check_choices(kinds, EDIT_KINDS, "edit kind")
    check_choices(direction, DIRECTIONS, "edit direction (--direction)")
    return setup_windows(model, threads, device, dtype, seq_len=seq_len, layers=layers,
                         tokens=(prompts + other) * seq_len)


def edit_specificity(model: str = MODEL_OPT, layers: str = typer.Option("all", "--layers"),
                     kinds: str = typer.Option("ffn_out,down_col", "--kinds", help="ffn_out, down_col"),
                     direction: str = typer.Option("unembed", "--direction", help="unembed | centered"),
                     scale: float = typer.Option(1.0, "--scale", help="‖edit‖ / ‖Φ_ℓ‖ at the last position"),
                     target_rank: int = typer.Option(10, "--target-rank", help="target = this rank (0 = top)"),
                     seeds: int = typer.Option(5, "--seeds", max=MAX_SEEDS, help="random directions (seeds 0..N-1)"),
                     prompts: int = typer.Option(8, "--prompts"), seq_len: int = typer.Option(32, "--context"),
                     as_json: bool = JSON_OPT, out: Path | None = OUT_OPT, csv: Path | None = CSV_OPT,
                     threads: int = THREADS_OPT,
                     device: str = DEVICE_OPT, dtype: str = DTYPE_OPT) -> None:
    """FFN-value edits toward a target's unembedding vs random directions: target move / non-target drift."""
    from geosteer_paper.dynamics.editing import edit_study

    m, chosen, ids = _edit_inputs(model, layers, seeds, prompts, 0, seq_len, threads, device, dtype,
                                  kinds=kinds, direction=direction, target_rank=target_rank)
    recs, summ = edit_study(m, ids, chosen, [s.strip() for s in kinds.split(",") if s.strip()], direction,
                            scale, target_rank, list(range(seeds)))
    meta = run_meta(m, prompts=int(ids.shape[0]), seq_len=seq_len, direction=direction, scale=scale,
                 target_rank=target_rank, seeds=seeds)
    write_summary(summ, {"edits": recs}, meta, out, csv, as_json, "editing specificity")


def edit_linearity(model: str = MODEL_OPT, layers: str = typer.Option("all", "--layers"),
                   kinds: str = typer.Option("ffn_out", "--kinds", help="ffn_out, down_col"),
                   direction: str = typer.Option("unembed", "--direction", help="unembed | centered"),
                   scales: str = typer.Option("0.25,0.5,1,2", "--scales", help="edit sizes s (> 0, >= 2)"),
                   target_rank: int = typer.Option(10, "--target-rank", help="target = this rank (0 = top)"),
                   seeds: int = typer.Option(2, "--seeds", max=MAX_SEEDS, help="random directions (seeds 0..N-1)"),
                   prompts: int = typer.Option(8, "--prompts"), seq_len: int = typer.Option(32, "--context"),
                   as_json: bool = JSON_OPT, out: Path | None = OUT_OPT, csv: Path | None = CSV_OPT,
                   threads: int = THREADS_OPT,
                   device: str = DEVICE_OPT, dtype: str = DTYPE_OPT) -> None:
    """Target move vs edit size s: slope and R² of the line through (0, 0) and (s, move(s)) per prompt."""
    from geosteer.errors import GeosteerError
    from geosteer_paper.dynamics.editing import edit_linearity as study
    from geosteer_paper.dynamics.prefix import check_positive

    check_positive(seeds, "--seeds")
    check_positive(prompts, "--prompts")
    try:
        values = [float(v) for v in scales.split(",") if v.strip()]
    except ValueError:
        raise GeosteerError(f"--scales must be numbers (got '{scales}')") from None
    if any(not (v > 0 and v < float("inf")) for v in values):
        raise GeosteerError(f"--scales must be finite and > 0 (got '{scales}')")
    if len(values) < 2 or len(set(values)) < len(values):
        raise GeosteerError(f"--scales needs at least 2 different sizes to fit a line (got '{scales}')")
    m, chosen, ids = _edit_inputs(model, layers, seeds, prompts, 0, seq_len, threads, device, dtype,
                                  kinds=kinds, direction=direction, target_rank=target_rank)
    fits, summ = study(m, ids, chosen, [k.strip() for k in kinds.split(",") if k.strip()], direction, values,
                       target_rank, list(range(seeds)))
    meta = run_meta(m, prompts=int(ids.shape[0]), seq_len=seq_len, direction=direction, scales=values,
                 target_rank=target_rank, seeds=seeds, fit="least-squares line through (0,0) and (s, target_move)")
    write_summary(summ, {"fits": fits}, meta, out, csv, as_json, "edit linearity (R²)")


def edit_locality(model: str = MODEL_OPT, layers: str = typer.Option("all", "--layers"),
                  direction: str = typer.Option("unembed", "--direction", help="unembed | centered"),
                  scale: float = typer.Option(1.0, "--scale", help="‖edit‖ / ‖down-projection output‖, last position"),
                  target_rank: int = typer.Option(10, "--target-rank", help="target = this rank (0 = top)"),
                  seeds: int = typer.Option(2, "--seeds", max=MAX_SEEDS, help="random directions (seeds 0..N-1)"),
                  prompts: int = typer.Option(8, "--prompts"), seq_len: int = typer.Option(32, "--context"),
                  other: int = typer.Option(4, "--other", help="other held-out windows (after the prompts)"),
                  as_json: bool = JSON_OPT, out: Path | None = OUT_OPT, csv: Path | None = CSV_OPT,
                  threads: int = THREADS_OPT,
                  device: str = DEVICE_OPT, dtype: str = DTYPE_OPT) -> None:
    """down_col edits on other text: next-token KL at every position of held-out windows that are not the prompts."""
    from geosteer_paper.dynamics.editing import down_col_locality
    from geosteer_paper.dynamics.prefix import check_positive

    check_positive(other, "--other")
    m, chosen, w = _edit_inputs(model, layers, seeds, prompts, other, seq_len, threads, device, dtype,
                                kinds=None, direction=direction, target_rank=target_rank)
    recs, summ = down_col_locality(m, w[:prompts], w[prompts:], chosen, direction, scale, target_rank,
                                   list(range(seeds)))
    meta = run_meta(m, prompts=prompts, other=int(w.shape[0] - prompts), seq_len=seq_len, direction=direction,
                 scale=scale, target_rank=target_rank, seeds=seeds,
                 other_text="the held-out windows right after the prompts' windows")
    write_summary(summ, {"edits": recs}, meta, out, csv, as_json, "down_col locality (KL)")
