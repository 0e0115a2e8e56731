"""Training attention surfaces on a frozen model: ``train_surfaces(...)`` and ``geosteer manifold train``.

Only the coefficients C (paper Eq. 1, initialised to zero = the stock model) train, with next-token
cross-entropy on the bundled corpus' train split (or a text file) through the generic loop
:func:`geosteer.train.train` (AdamW, warmup + cosine, clipping, checkpoints and exact resume, NaN stop,
accelerate). ``calibrate_ranges`` picks each layer's grid range from post-RoPE q/k quantiles (the paper
does not state its range). The artifact records the base model, grid, ranges (and how they were chosen),
training tokens, held-out perplexity before/after, the git commit (via ``save``) and the command.

Training state (checkpoint, history) lives beside the artifact in ``<out>.train/`` because an artifact
folder is replaced as a whole on every save.
"""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from geosteer.errors import GeosteerError
from geosteer.io_utils import atomic_write_json
from geosteer.models.loading import input_device
from geosteer.train import TrainConfig, train
from geosteer.train.data import load_texts, token_stream, windows


def parse_layers(spec: str | None, n_layers: int) -> list[int] | None:
    """``"8-15"``, ``"0,2,5-7"``, ``"all"`` or None (all) → sorted layer list, validated."""
    if spec is None or str(spec).strip().lower() in ("", "all"):
        return None
    out: set[int] = set()
    for part in str(spec).split(","):
        part = part.strip()
        try:
            if "-" in part:
                a, b = (int(x) for x in part.split("-", 1))
                if a > b:
                    raise ValueError
                out.update(range(a, b + 1))
            else:
                out.add(int(part))
        except ValueError:
            raise GeosteerError(f"bad layer spec '{spec}': use e.g. 8-15, 0,2,5-7 or all") from None
    bad = sorted(x for x in out if not 0 <= x < n_layers)
    if bad:
        raise GeosteerError(f"layer {bad[0]} out of range: this model has layers 0..{n_layers - 1}")
    return sorted(out)


@torch.no_grad()
def calibrate_ranges(model, tok, layers: list[int], *, text: str | Path = "train", batches: int = 4,
                     batch_size: int = 4, seq_len: int = 128, quantile: float = 0.99, seed: int = 0,
                     max_samples: int = 2_000_000) -> list[tuple[float, float]]:
    """Per-layer symmetric grid range (-r, r): r = the ``quantile`` of |q| and |k| pooled (post-RoPE).

    Reads ``batches`` × ``batch_size`` windows of ``seq_len`` tokens from ``text`` (the first windows of a
    seeded shuffle, like training) and records every covered layer's post-RoPE queries and keys.
    """
    from geosteer.record import AttentionRecorder
    from geosteer.steer import steer
    from geosteer.train.data import BatchOrder

    if not 0.5 <= quantile < 1.0:
        raise GeosteerError(f"calibration quantile must be in [0.5, 1), got {quantile}")
    stream = token_stream(tok, load_texts(text), max_tokens=max(200_000, 2 * batches * batch_size * seq_len))
    w = windows(stream, seq_len, getattr(tok, "bos_token_id", None))
    order = BatchOrder(w.shape[0], batch_size, seed)
    rec = AttentionRecorder(layers=layers, what=("query", "key"))
    device = input_device(model)
    with steer(model, rec):
        for s in range(batches):
            x = w[order.indices(s)].to(device)
            model(input_ids=x, use_cache=False)
    g = torch.Generator().manual_seed(seed)
    ranges = []
    for layer in layers:
        vals = torch.cat([torch.cat([t[:, :, 1:].abs().flatten() for t in rec[(name, layer)]])  # skip BOS
                          for name in ("query", "key")]).float()
        if vals.numel() > max_samples:
            vals = vals[torch.randint(vals.numel(), (max_samples,), generator=g)]
        r = float(torch.quantile(vals, quantile))
        r = max(r, 1e-3)
        ranges.append((-round(r, 4), round(r, 4)))
    return ranges


STORAGE_DTYPES = ("float32", "float16", "bfloat16")


def check_options(*, out: Path, grid_size: int, grid_range, calibrate: bool, quantile: float,
                  storage_dtype: str, text: str | Path) -> None:
    """Validate every option of a surfaces run before any model is loaded or any step is taken, so a
    mistake (e.g. ``--dtype int8``) costs nothing instead of failing after training."""
    from geosteer.data.corpus import SPLITS
    from geosteer.manifold.bspline import check_grid

    if storage_dtype not in STORAGE_DTYPES:
        raise GeosteerError(f"storage dtype must be one of {', '.join(STORAGE_DTYPES)} (got {storage_dtype})")
    check_grid(grid_size, *grid_range)
    if calibrate and not 0.5 <= quantile < 1.0:
        raise GeosteerError(f"calibration quantile must be in [0.5, 1), got {quantile}")
    if out.exists() and not out.is_dir():
        raise GeosteerError(f"--out {out} exists and is not a folder")
    if not (isinstance(text, str) and text in SPLITS) and not Path(text).is_file():
        raise GeosteerError(f"training text '{text}' is neither a corpus split ({', '.join(SPLITS)}) nor a "
                            "readable text file")


def train_surfaces(
    model,
    tok,
    out: str | Path,
    *,
    grid_size: int = 8,
    grid_range: tuple[float, float] = (-4.0, 4.0),
    calibrate: bool = False,
    calibrate_quantile: float = 0.99,
    layers: list[int] | None = None,
    cfg: TrainConfig | None = None,
    text: str | Path = "train",
    resume: bool = False,
    overwrite: bool = False,
    storage_dtype: str = "float32",
    command: str | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = print,
    stop_at: int | None = None,
    **train_kw,
):
    """Attach fresh surfaces (or resume), train them, save the artifact at ``out``; return (bank, result).

    The bank stays attached to ``model`` afterwards (``geosteer.manifold.detach(model)`` removes it).
    ``stop_at`` ends early (as if killed) without writing the artifact; ``resume=True`` continues.
    """
    from geosteer.manifold import attach, detach, save
    from geosteer.models.anatomy import anatomy
    from geosteer.train.checkpoint import find_checkpoint, load_checkpoint

    cfg = cfg or TrainConfig(tokens=262_144)
    say = log or (lambda s: None)
    out = Path(out)
    check_options(out=out, grid_size=grid_size, grid_range=grid_range, calibrate=calibrate,
                  quantile=calibrate_quantile, storage_dtype=storage_dtype, text=text)
    state_dir = Path(str(out) + ".train")
    an = anatomy(model)
    layers = an.check_layers(layers)
    calibration = None
    ranges = None
    ckpt = find_checkpoint(state_dir) if state_dir.is_dir() else None
    if resume and ckpt is not None:
        # the ranges must be those of the interrupted run (calibration may see other data now)
        prev = load_checkpoint(ckpt)["extra"].get("surfaces", {})
        ranges = [tuple(r) for r in prev.get("ranges", [])] or None
        calibration = prev.get("calibration")
        if prev.get("layers") != layers or prev.get("grid_size") != grid_size:
            raise GeosteerError(f"cannot resume {ckpt}: it trained grid {prev.get('grid_size')} on layers "
                                f"{prev.get('layers')}, now grid {grid_size} on layers {layers}")
    elif calibrate:
        t0 = time.perf_counter()
        ranges = calibrate_ranges(model, tok, layers, text=text, seq_len=cfg.seq_len, seed=cfg.seed,
                                  quantile=calibrate_quantile)
        calibration = {"method": "symmetric quantile of |q| and |k| (post-RoPE, BOS excluded)",
                       "quantile": calibrate_quantile, "batches": 4, "batch_size": 4, "seq_len": cfg.seq_len,
                       "seconds": round(time.perf_counter() - t0, 1)}
        say("calibrated ranges: " + ", ".join(f"L{x}: ±{r[1]:.3g}"
                                              for x, r in zip(layers, ranges, strict=True)))
    detach(model)
    bank = attach(model, grid_size=grid_size, grid_range=grid_range, layers=layers, ranges=ranges)
    bank.coefficients.requires_grad_(True)
    surf = {"grid_size": grid_size, "layers": layers,
            "ranges": [list(bank.range_of(x)) for x in layers], "calibration": calibration}
    say(f"surfaces: {bank.extra_repr()}; {cfg.total_steps} steps x {cfg.batch_size} x {cfg.seq_len} tokens")
    res = train(model, bank, cfg, tok=tok, text=text, out_dir=state_dir, resume=resume, overwrite=overwrite,
                progress=progress, log=log, stop_at=stop_at, checkpoint_extra={"surfaces": surf}, **train_kw)
    bank.coefficients.requires_grad_(False)
    atomic_write_json(state_dir / "history.json", {"meta": {"config": cfg.to_dict(), **surf},
                                                   "rows": res.history, "evals": res.evals})
    if res.stopped_early:
        say(f"stopped after step {res.steps_done}/{res.total_steps}; resume with --resume")
        return bank, res
    n_model = sum(p.numel() for p in model.parameters())
    training = {
        "text": str(text), "tokens": res.tokens_seen, "steps": res.steps_done, "config": cfg.to_dict(),
        "heldout": {"split": "heldout", "context": cfg.eval_context, "stride": cfg.eval_stride,
                    "max_tokens": cfg.eval_tokens, "ppl_before": res.ppl_before, "ppl_after": res.ppl_after,
                    "evals": res.evals},
        "final_loss": res.final_loss, "seconds_this_run": round(res.seconds, 1),
        "resumed_from": res.resumed_from,
        "threads": torch.get_num_threads(),
        "parameter_overhead": {"surface_params": bank.n_parameters(), "model_params": n_model,
                               "fraction": bank.n_parameters() / n_model},
    }
    save(bank, out, dtype=storage_dtype, training=training, calibration=calibration,
         command=command or " ".join(shlex.quote(a) for a in sys.argv))
    say(f"saved surfaces to {out} (held-out ppl {res.ppl_before} -> {res.ppl_after})")
    return bank, res


def train_command(sub_app) -> None:
    """Add ``train`` to the ``geosteer manifold`` sub-app (called by ``geosteer.manifold.cli``)."""
    import typer

    from geosteer.cli import MODEL_OPT, emit

    @sub_app.command("train")
    def train_cmd(
        out: Path = typer.Option(..., "--out", "-o", help="artifact folder to write (state in <out>.train/)"),
        model: str = MODEL_OPT,
        grid: int = typer.Option(8, "--grid", help="grid intervals g (K = g + 3 basis functions)"),
        grid_range: tuple[float, float] = typer.Option((-4.0, 4.0), "--range", help="grid range LO HI"),
        calibrate: bool = typer.Option(False, "--calibrate", help="per-layer range from q/k quantiles"),
        quantile: float = typer.Option(0.99, "--quantile", help="quantile of |q|,|k| for --calibrate"),
        layers: str = typer.Option("all", "--layers", help="e.g. 8-15, 0,2,5-7 or all"),
        tokens: int = typer.Option(None, "--tokens", help="training tokens (default 262144 unless --steps)"),
        steps: int = typer.Option(None, "--steps", help="optimizer steps (overrides --tokens)"),
        seq_len: int = typer.Option(128, "--seq-len"),
        batch: int = typer.Option(8, "--batch", help="windows per step (global)"),
        micro_batch: int = typer.Option(None, "--micro-batch", help="split each step (less memory)"),
        lr: float = typer.Option(2e-2, "--lr"),
        warmup: int = typer.Option(None, "--warmup", help="warmup steps (default 5%)"),
        seed: int = typer.Option(0, "--seed"),
        text: str = typer.Option("train", "--text", help="corpus split (train) or a UTF-8 text file"),
        eval_tokens: int = typer.Option(16384, "--eval-tokens", help="held-out tokens per evaluation"),
        eval_every: int = typer.Option(0, "--eval-every", help="steps between held-out evaluations"),
        checkpoint_every: int = typer.Option(25, "--checkpoint-every"),
        resume: bool = typer.Option(False, "--resume", help="continue from <out>.train/checkpoint.safetensors"),
        overwrite: bool = typer.Option(False, "--overwrite", help="start over even if a checkpoint exists"),
        dtype: str = typer.Option("float32", "--dtype", help="artifact storage: float32|float16"),
        mixed_precision: str = typer.Option("no", "--mixed-precision", help="no|bf16|fp16 (accelerate; GPU)"),
        fsdp: bool = typer.Option(False, "--fsdp", help="shard the frozen model over the processes "
                                                        "(accelerate launch, FSDP2)"),
        threads: int = typer.Option(None, "--threads", help="torch CPU threads"),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """Train attention surfaces on a frozen model (only the coefficients train)."""
        from geosteer import anatomy, load_model

        if threads is not None and threads < 1:
            raise GeosteerError(f"--threads must be >= 1 (got {threads})")
        if tokens is None and steps is None:
            tokens = 262_144
        check_options(out=out, grid_size=grid, grid_range=tuple(grid_range), calibrate=calibrate,
                      quantile=quantile, storage_dtype=dtype, text=text)
        parse_layers(layers, 1 << 30)  # the syntax now; the range once the model is loaded
        if threads:
            torch.set_num_threads(threads)
        cfg = TrainConfig(lr=lr, steps=steps, tokens=tokens, batch_size=batch, micro_batch=micro_batch,
                          seq_len=seq_len, warmup_steps=warmup, seed=seed, eval_every=eval_every,
                          eval_tokens=eval_tokens, checkpoint_every=checkpoint_every,
                          mixed_precision=mixed_precision, fsdp=fsdp)
        m, tok = load_model(model)
        layer_list = parse_layers(layers, anatomy(m).n_layers)
        args = sys.argv[1:]
        if "train" in args[:3]:  # geosteer [..] manifold train ...
            args = args[args.index("train") + 1:]
        command = "geosteer manifold train " + " ".join(shlex.quote(a) for a in args)
        _, res = train_surfaces(m, tok, out, grid_size=grid, grid_range=tuple(grid_range),
                                calibrate=calibrate, calibrate_quantile=quantile, layers=layer_list, cfg=cfg,
                                text=text,
                                resume=resume, overwrite=overwrite, storage_dtype=dtype, command=command,
                                progress=sys.stderr.isatty() and not as_json,
                                log=(lambda s: print(s, file=sys.stderr, flush=True)))
        summary = {"out": str(out), "steps": res.steps_done, "tokens": res.tokens_seen,
                   "final_loss": res.final_loss, "ppl_before": res.ppl_before, "ppl_after": res.ppl_after,
                   "seconds": round(res.seconds, 1)}
        emit(summary, as_json)


if __name__ == "__main__":  # ``python -m geosteer.manifold.train ...`` == ``geosteer manifold train ...``
    import typer as _typer

    from geosteer.cli import main as _main  # noqa: F401 - same error handling as the CLI

    _app = _typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    train_command(_app)
    try:
        _app(standalone_mode=False)
    except (GeosteerError, ValueError, FileNotFoundError) as _e:
        print(f"error: {_e}", file=sys.stderr)
        sys.exit(2)
