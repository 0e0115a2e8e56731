"""``geosteer study dynamics parallelize``: defect-guided parallelisation, the loss increase vs the number of
layers run in parallel (paper Figs 5 / 6 / 16). Tidy records via ``--out`` (.json/.csv) / ``--csv``."""

from __future__ import annotations

from pathlib import Path

import typer

from geosteer.cli.common import DEVICE_OPT, DTYPE_OPT, JSON_OPT, MAX_SEEDS, MODEL_OPT, THREADS_OPT, emit, model_config
from geosteer.cli.outputs import out_file
from geosteer.io_utils import atomic_write_json
from geosteer.models.anatomy import anatomy
from geosteer_paper.dynamics.studies.common import (
    BATCH_OPT,
    CSV_OPT,
    OUT_OPT,
    SEQ_OPT,
    TOKENS_OPT,
    parse_ints,
    run_meta,
    setup_model,
    write_rows,
)


def _read_cache(path: Path, run_key: dict) -> dict[str, float]:
    """The losses of an earlier run with the same ``run_key`` (empty where ``path`` does not exist yet)."""
    from geosteer.errors import GeosteerError
    from geosteer.io_utils import read_json

    if not path.exists():
        return {}
    data = read_json(path, "--cache")
    if not isinstance(data, dict) or not isinstance(data.get("losses"), dict):
        raise GeosteerError(f"--cache {path}: not a loss cache of this study (no 'losses' object)")
    if data.get("run") != run_key:
        raise GeosteerError(f"--cache {path} holds losses of another run ({data.get('run')}); give a new file "
                            f"for {run_key}")
    return {str(k): float(v) for k, v in data["losses"].items()}


def parallelize(model: str = MODEL_OPT,
                counts: str = typer.Option("", "--counts", help="layer counts, e.g. 0,2,4 (default: all)"),
                seeds: int = typer.Option(5, "--seeds", max=MAX_SEEDS, help="random orders (seeds 0..N-1)"),
                threshold: float = typer.Option(0.05, "--threshold"),
                defect_tokens: int = typer.Option(1024, "--defect-tokens", help="train tokens for C_ℓ"),
                measured: bool = typer.Option(True, "--measured/--no-measured",
                                              help="also each layer alone + the order by its ΔL"),
                tokens: int = TOKENS_OPT, seq_len: int = SEQ_OPT, batch_size: int = BATCH_OPT,
                cache: Path | None = typer.Option(None, "--cache", callback=out_file(".json"),
                                                  help="keep each held-out loss in this JSON file and reuse "
                                                       "those already there: a rerun resumes"),
                as_json: bool = JSON_OPT, out: Path | None = OUT_OPT, csv: Path | None = CSV_OPT,
                threads: int = THREADS_OPT,
                device: str = DEVICE_OPT, dtype: str = DTYPE_OPT) -> None:
    """Defect-guided parallelisation: ΔL vs number of parallelised layers (low-C / random / high-C first)."""
    from geosteer.dynamics.diagnostics import corpus_windows
    from geosteer.dynamics.parallel import (
        defect_predicts_cost,
        defect_profile,
        parallel_curve,
        safe_speedup,
        submodule_times,
    )

    if seeds < 0:
        raise ValueError(f"--seeds must be >= 0 (got {seeds})")
    if counts:
        from geosteer.models.limits import num_layers

        config = model_config(model)
        n_cfg = num_layers(config) if config is not None else None
        bad = [c for c in parse_ints(counts, "--counts") if c < 0 or (n_cfg is not None and c > n_cfg)]
        if bad:
            raise ValueError(f"--counts: {bad[0]} parallel layers is not possible: give counts in 0.."
                             f"{n_cfg if n_cfg is not None else 'the number of layers'}")
    run_key = {"model": model, "tokens": tokens, "seq_len": seq_len, "device": device, "dtype": dtype}
    losses = _read_cache(cache, run_key) if cache is not None else None
    m, tok = setup_model(model, threads, device, dtype, seq_len=seq_len)
    n = anatomy(m).n_layers
    cnt = parse_ints(counts, "--counts") if counts else list(range(n + 1))
    defects = defect_profile(m, corpus_windows(tok, "train", defect_tokens, seq_len), batch_size)
    ids = corpus_windows(tok, "heldout", tokens, seq_len)
    times = submodule_times(m, ids[:1])
    keep = None if cache is None else (lambda known: atomic_write_json(cache, {"run": run_key, "losses": known}))
    rows = parallel_curve(m, ids, defects, cnt, seeds=range(seeds), batch_size=batch_size, times=times,
                          measured=measured, losses=losses, on_loss=keep)
    safe = safe_speedup(rows, threshold)
    rho = defect_predicts_cost(rows)
    all_rows = ([{"table": "defect", "layer": i, "defect": c, **times[i]} for i, c in enumerate(defects)]
                + [{"table": "curve", **r} for r in rows if r["strategy"] != "single"]
                + [{"table": "single", **r} for r in rows if r["strategy"] == "single"]
                + [{"table": "safe", **r} for r in safe]
                + ([{"table": "defect_vs_single", **rho}] if rho else []))
    meta = run_meta(m, tokens=int(ids.numel()), seq_len=seq_len, defect_tokens=defect_tokens)
    write_rows(all_rows, meta, out, csv)
    if as_json:
        emit({"defects": defects, "curve": rows, "safe": safe, "defect_vs_single": rho}, True)
    else:
        emit([r for r in rows if r["strategy"] not in ("random", "single") or r["seed"] == 0
              and r["strategy"] == "random"], False, table_title="loss increase vs parallelised layers")
        emit(safe, False, table_title=f"safe speed-up at ΔL ≤ {threshold}")
        if rho:
            emit(rho, False)
