"""Training attention surfaces on a frozen model: ``train_surfaces(...)`` (``geosteer learn surfaces`` in cli.py).

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

import math
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from geosteer.data.corpus import SPLITS
from geosteer.errors import GeosteerError
from geosteer.interventions import steer
from geosteer.io_utils import atomic_write_json
from geosteer.kernels.bspline import check_grid
from geosteer.manifold import install, save, uninstall
from geosteer.manifold.low_rank_train import check_rank, factorise, merge_factors, trained_parameters
from geosteer.models.anatomy import (
    anatomy,
    parse_layers,  # noqa: F401 - the one layer-list parser, re-exported
)
from geosteer.models.loading import input_device
from geosteer.outputs import check_output_folder
from geosteer.record import AttentionRecorder
from geosteer.train import TrainConfig, train
from geosteer.train.checkpoint import check_run, find_checkpoint, load_checkpoint, run_record
from geosteer.train.data import BatchOrder, load_texts, token_stream, windows
from geosteer.train.objective import lm_kl_loss


@torch.no_grad()
def calibrate_ranges(model, tok, layers: list[int], *, text: str | Path = "train", batches: int = 4,
                     batch_size: int = 4, seq_len: int = 128, quantile: float = 0.99, seed: int = 0,
                     max_samples: int = 2_000_000) -> list[tuple[float, float]]:
    """Per-layer symmetric grid range (-r, r): r = the ``quantile`` of |q| and |k| pooled (post-RoPE).

    Reads ``batches`` × ``batch_size`` windows of ``seq_len`` tokens from ``text`` (the first windows of a
    seeded shuffle, like training) and records every covered layer's post-RoPE queries and keys.
    """

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


def _saved_ranges(prev: dict, n_layers: int, path: Path) -> list[tuple[float, float]]:
    """A checkpoint's calibrated per-layer ranges: ``n_layers`` pairs of finite numbers lo < hi."""
    import math

    ranges = prev.get("ranges")
    ok = isinstance(ranges, list) and len(ranges) == n_layers and all(
        isinstance(r, list) and len(r) == 2 and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                    and math.isfinite(x) for x in r) and r[0] < r[1]
        for r in ranges)
    if not ok:
        raise GeosteerError(f"cannot resume {path}: its calibrated ranges are not {n_layers} pairs lo < hi")
    return [(float(a), float(b)) for a, b in ranges]


STORAGE_DTYPES = ("float32", "float16", "bfloat16")


def check_options(*, out: Path, grid_size: int, grid_range, calibrate: bool, quantile: float,
                  storage_dtype: str, text: str | Path, rank: int | None = None) -> None:
    """Validate every option of a surfaces run before any model is loaded or any step is taken, so a
    mistake (e.g. ``--dtype int8``) costs nothing instead of failing after training."""

    if storage_dtype not in STORAGE_DTYPES:
        raise GeosteerError(f"storage dtype must be one of {', '.join(STORAGE_DTYPES)} (got {storage_dtype})")
    check_grid(grid_size, *grid_range)
    check_rank(rank, grid_size)
    if calibrate and not 0.5 <= quantile < 1.0:
        raise GeosteerError(f"calibration quantile must be in [0.5, 1), got {quantile}")
    check_output_folder(out, "geosteer-surfaces", what="--out")  # never over a folder of the user's files
    if not (isinstance(text, str) and text in SPLITS) and not Path(text).is_file():
        raise GeosteerError(f"training text '{text}' is neither a corpus split ({', '.join(SPLITS)}) nor a "
                            "readable text file")


def check_kl_weight(weight: float, what: str = "KL weight") -> None:
    """The fluency term's weight: a finite number >= 0 (one line otherwise)."""
    if not (weight >= 0 and math.isfinite(weight)):
        raise GeosteerError(f"{what} must be a finite number >= 0, got {weight}")


def _stock_logits(model, bank, batch: torch.Tensor) -> torch.Tensor:
    """The stock model's logits on ``batch``: the same forward with the surfaces switched off."""
    bank.enabled = False
    try:
        return model(input_ids=batch).logits
    finally:
        bank.enabled = True


def _ranges(model, tok, state_dir: Path, run: dict, layers: list[int], *, text, cfg: TrainConfig, resume: bool,
            calibrate: bool, quantile: float, say: Callable[[str], None]):
    """The per-layer grid ranges and calibration record: a resumed run's own, freshly calibrated, or none."""
    calibration = None
    ranges = None
    ckpt = find_checkpoint(state_dir)  # a state "folder" that is a file is refused here, before any pass
    if resume and ckpt is not None:
        state = load_checkpoint(ckpt)
        check_run(state, run_record(model, **run), ckpt)
        prev = state["extra"].get("surfaces", {})
        if calibrate:  # the calibrated ranges of the interrupted run (calibration may see other data now)
            ranges = _saved_ranges(prev, len(layers), ckpt)
            calibration = prev.get("calibration")
    elif calibrate:
        t0 = time.perf_counter()
        ranges = calibrate_ranges(model, tok, layers, text=text, seq_len=cfg.seq_len, seed=cfg.seed,
                                  quantile=quantile)
        calibration = {"method": "symmetric quantile of |q| and |k| (post-RoPE, BOS excluded)",
                       "quantile": quantile, "batches": 4, "batch_size": 4, "seq_len": cfg.seq_len,
                       "seconds": round(time.perf_counter() - t0, 1)}
        say("calibrated ranges: " + ", ".join(f"L{x}: ±{r[1]:.3g}"
                                              for x, r in zip(layers, ranges, strict=True)))
    return ranges, calibration


def _training_record(model, res, cfg: TrainConfig, *, text, n_trained: int, rank: int | None,
                     kl_weight: float) -> dict:
    """What the saved artifact records about its training run (data, steps, held-out ppl, overhead)."""
    n_model = sum(p.numel() for p in model.parameters())
    training = {
        "text": str(text), "tokens": res.tokens_seen, "steps": res.steps_done, "config": cfg.to_dict(),
        "heldout": {"split": "heldout", "context": cfg.eval_context, "stride": cfg.eval_stride,
                    "max_tokens": cfg.eval_tokens, "ppl_before": res.ppl_before, "ppl_after": res.ppl_after,
                    "evals": res.evals},
        "final_loss": res.final_loss, "seconds_this_run": round(res.seconds, 1),
        "resumed_from": res.resumed_from,
        "threads": torch.get_num_threads(),
        "parameter_overhead": {"surface_params": n_trained, "model_params": n_model,
                               "fraction": n_trained / n_model},
    }
    if rank is not None:
        training["rank"] = int(rank)
    if kl_weight > 0:
        training["kl_weight"] = float(kl_weight)
    return training


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
    rank: int | None = None,
    command: str | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = print,
    stop_at: int | None = None,
    kl_weight: float = 0.0,
    **train_kw,
):
    """Install fresh surfaces (or resume), train them, save the artifact at ``out``; return (bank, result).

    The bank stays installed on ``model`` afterwards (``geosteer.manifold.uninstall(model)`` removes it).
    ``stop_at`` ends early (as if killed) without writing the artifact; ``resume=True`` continues.
    ``rank``: train rank-r surfaces directly (C_d = U_d W_dᵀ, :mod:`geosteer.manifold.low_rank_train`).
    ``kl_weight`` > 0 adds the fluency term β · KL(P_surfaces ‖ P_stock) per position to the cross-entropy
    (:func:`geosteer.train.objective.lm_kl_loss`; the stock logits with the surfaces switched off).
    """

    cfg = cfg or TrainConfig(tokens=262_144)
    say = log or (lambda s: None)
    out = Path(out)
    check_options(out=out, grid_size=grid_size, grid_range=grid_range, calibrate=calibrate,
                  quantile=calibrate_quantile, storage_dtype=storage_dtype, text=text, rank=rank)
    state_dir = Path(str(out) + ".train")
    an = anatomy(model)
    layers = an.check_layers(layers)
    # what a resumed checkpoint must share with this run (its --range/--calibrate never override ours)
    run = {"grid_size": grid_size, "layers": layers, "heads": an.n_heads, "head_dim": an.head_dim,
           "grid_range": [float(x) for x in grid_range], "calibrate": bool(calibrate),
           "calibrate_quantile": float(calibrate_quantile) if calibrate else None}
    if rank is not None:  # absent for full-rank runs: their checkpoints' records stay as they were
        run["rank"] = int(rank)
    check_kl_weight(kl_weight)
    if kl_weight > 0:  # absent at 0: earlier checkpoints' records stay as they were
        run["kl_weight"] = float(kl_weight)
    ranges, calibration = _ranges(model, tok, state_dir, run, layers, text=text, cfg=cfg, resume=resume,
                                  calibrate=calibrate, quantile=calibrate_quantile, say=say)
    uninstall(model)
    bank = install(model, grid_size=grid_size, grid_range=grid_range, layers=layers, ranges=ranges)
    if rank is None:
        bank.coefficients.requires_grad_(True)
    else:
        factorise(bank, rank, seed=cfg.seed)
    n_trained = trained_parameters(bank)
    surf = {"grid_size": grid_size, "layers": layers,
            "ranges": [list(bank.range_of(x)) for x in layers], "calibration": calibration}
    say(f"surfaces: {bank.extra_repr()}; {cfg.total_steps} steps x {cfg.batch_size} x {cfg.seq_len} tokens")
    if kl_weight > 0:
        train_kw["loss"] = lm_kl_loss(lambda m, batch: _stock_logits(m, bank, batch), kl_weight)
    res = train(model, bank, cfg, tok=tok, text=text, out_dir=state_dir, resume=resume, overwrite=overwrite,
                progress=progress, log=log, stop_at=stop_at, checkpoint_extra={"surfaces": surf}, run=run,
                **train_kw)
    merge_factors(bank)  # plain frozen coefficients (the product U Wᵀ for a rank-r run)
    atomic_write_json(state_dir / "history.json", {"meta": {"config": cfg.to_dict(), **surf},
                                                   "rows": res.history, "evals": res.evals})
    if res.stopped_early:
        say(f"stopped after step {res.steps_done}/{res.total_steps}; resume with --resume")
        return bank, res
    training = _training_record(model, res, cfg, text=text, n_trained=n_trained, rank=rank, kl_weight=kl_weight)
    save(bank, out, dtype=storage_dtype, training=training, calibration=calibration,
         command=command or " ".join(shlex.quote(a) for a in sys.argv))
    say(f"saved surfaces to {out} (held-out ppl {res.ppl_before} -> {res.ppl_after})")
    return bank, res
