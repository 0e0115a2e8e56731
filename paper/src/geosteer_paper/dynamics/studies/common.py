"""What every dynamics command shares: the output and window options, list parsers with one-line errors,
the checked model load, and the tidy-record writer with its run metadata."""

from __future__ import annotations

import math
from pathlib import Path

import typer

from geosteer.cli.common import check_layers, check_positions, emit, load
from geosteer.cli.outputs import out_file, out_records

TOKENS_OPT = typer.Option(2048, "--tokens", "-n", help="held-out tokens (cut into --context windows)")
SEQ_OPT = typer.Option(256, "--context", help="window length in tokens (BOS first)")
BATCH_OPT = typer.Option(4, "--batch-size")
OUT_OPT = typer.Option(None, "--out", "-o", help="write tidy records (.json or .csv)", callback=out_records())
CSV_OPT = typer.Option(None, "--csv", help="write tidy records as CSV", callback=out_file(".csv"))


def parse_floats(spec: str, name: str) -> list[float]:
    """A non-empty comma-separated list of finite numbers (one-line error naming ``name`` otherwise)."""
    try:
        values = [float(s) for s in spec.split(",") if s.strip()]
    except ValueError:
        values = []
    if not values or not all(math.isfinite(v) for v in values):
        raise ValueError(f"bad {name} '{spec}': comma-separated finite numbers, e.g. 0,0.5,1")
    return values


def parse_ints(spec: str, name: str) -> list[int]:
    """A non-empty comma-separated list of integers (one-line error naming ``name`` otherwise)."""
    try:
        values = [int(s) for s in spec.split(",") if s.strip()]
    except ValueError:
        values = []
    if not values:
        raise ValueError(f"bad {name} '{spec}': comma-separated integers, e.g. 1,4,16")
    return values


def check_choices(spec: str, valid, what: str) -> list[str]:
    """The comma-separated names in ``spec``, each one of ``valid`` (one-line error naming ``what``)."""
    names = [s.strip() for s in spec.split(",") if s.strip()]
    bad = [n for n in names if n not in valid] or ([] if names else [spec])
    if bad:
        raise ValueError(f"unknown {what} '{bad[0]}'; valid: {', '.join(valid)}")
    return names


def check_finite(value: float, name: str, lo: float | None = None) -> float:
    """``value`` if it is finite (and >= ``lo``), else a one-line error naming the option ``name``."""
    from geosteer.errors import GeosteerError

    if not math.isfinite(value) or (lo is not None and value < lo):
        raise GeosteerError(f"{name} must be finite{f' and >= {lo}' if lo is not None else ''} (got {value})")
    return value


def setup_model(model: str, threads: int, device: str = "cpu", dtype: str = "float32", *,
                seq_len: int | None = None, layers: str | None = None, layer: int | None = None,
                layers_opt: str = "--layers", seq_opt: str = "--context", ov_norm: str | None = None):
    """Check the window length and layer options against the config of ``model``, then load it."""
    if ov_norm is not None:
        from geosteer_paper.dynamics.fields import OV_NORMS

        check_choices(ov_norm, OV_NORMS, "ov_norm (--ov-norm)")
    if seq_len is not None:
        check_positions(model, seq_opt, seq_len)
    check_layers(model, layers_opt, layers)
    if layer is not None:
        check_layers(model, "--layer", str(layer))
    return load(model, threads=threads, device=device, dtype=dtype)


def setup_windows(model: str, threads: int, device: str, dtype: str, *, seq_len: int, layers: str, tokens: int):
    """:func:`setup_model`, then the checked ``layers`` and ``tokens`` held-out tokens cut into ``seq_len``
    windows. Returns (model, layers, windows)."""
    from geosteer.dynamics.diagnostics import corpus_windows
    from geosteer.models.anatomy import anatomy, parse_layers

    m, tok = setup_model(model, threads, device, dtype, seq_len=seq_len, layers=layers)
    chosen = anatomy(m).check_layers(parse_layers(layers, anatomy(m).n_layers))
    return m, chosen, corpus_windows(tok, "heldout", tokens, seq_len)


def write_rows(rows: list[dict], meta: dict, out: Path | None, csv: Path | None) -> None:
    """Write the tidy records to ``--out`` (.json/.csv) and ``--csv`` where given."""
    from geosteer.io_utils import write_records

    if out is not None:
        write_records(out, rows, meta)
    if csv is not None:
        write_records(csv if csv.suffix == ".csv" else csv.with_suffix(".csv"), rows, meta)


def write_summary(summary: list[dict], tables: dict[str, list[dict]], meta: dict, out: Path | None,
                  csv: Path | None, as_json: bool, title: str) -> None:
    """One tidy file of the ``summary`` table then each of ``tables`` (rows tagged ``"table"``, see
    :func:`write_rows`); shows the summary (under ``--json`` with the meta)."""
    write_rows([{"table": "summary", **s} for s in summary]
               + [{"table": name, **r} for name, rows in tables.items() for r in rows], meta, out, csv)
    emit({"meta": meta, "summary": summary} if as_json else summary, as_json, table_title=title)


def run_meta(m, **kw) -> dict:
    """The run's metadata: model id, torch version and threads, then ``kw``."""
    import torch

    from geosteer.models.loading import model_id

    return {"model": model_id(m), "torch": torch.__version__, "threads": torch.get_num_threads(), **kw}
