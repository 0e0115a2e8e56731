"""The component-scaling sweep (``geosteer study directional sweep``; paper Figure 3 / Table 1 controls):
held-out strided perplexity under each setting of a grid.

Each row is one setting evaluated on the same token ids as the matched no-op (the baseline row), so
``delta_ppl`` = edited − baseline is the paper's ΔPPL. Rows are written after every setting (atomic
rewrite), so an interrupted sweep keeps what it finished and ``resume`` skips those settings.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import torch

from geosteer.directional.config import (
    DEFAULT_VALUE_SPACE,
    VALUE_SITES,
    ComponentScaleConfig,
    check_value_space,
)
from geosteer.directional.sites import ComponentScale
from geosteer.errors import GeosteerError
from geosteer.eval.perplexity import strided_perplexity
from geosteer.interventions import steer
from geosteer.io_utils import write_records
from geosteer.progress import counter

SWEEP_SITES = ("value_exclude_self", "attn_out", "mlp_out")


def frange(lo: float, hi: float, step: float) -> list[float]:
    n = int(round((hi - lo) / step))
    return [round(lo + i * step, 10) for i in range(n + 1)]


def parse_grid(spec: str, name: str) -> list[float] | None:
    """``"paper"`` → None (the paper's grid), ``"none"`` → [], ``"lo:hi:step"`` or ``"0,0.5,2"`` → values."""

    spec = spec.strip().lower()
    if spec == "paper":
        return None
    if spec == "none":
        return []
    try:
        if ":" in spec:
            lo, hi, step = (float(x) for x in spec.split(":"))
            if not step > 0 or hi < lo:
                raise ValueError
            return frange(lo, hi, step)
        return [float(x) for x in spec.split(",") if x.strip()] or _empty()
    except ValueError:
        raise GeosteerError(f"bad {name} {spec!r}: 'paper', 'none', 'lo:hi:step' (e.g. -2:3:0.5) or "
                            "comma-separated numbers (e.g. 0,0.5,2)") from None


def _empty() -> list[float]:
    raise ValueError


def sweep_settings(sites: Sequence[str] = SWEEP_SITES, par_grid: Sequence[float] | None = None,
                   perp_grid: Sequence[float] | None = None,
                   value_spaces: Sequence[str] = (DEFAULT_VALUE_SPACE,)) -> list[ComponentScaleConfig]:
    """The paper's grid: s∥ ∈ [-2, 3] step 0.25 (s⊥ = 1) and s⊥ ∈ [0, 2] step 0.25 (s∥ = 1) per site,
    plus value_full and diag_removal at s∥ = 0 (Table 1 controls). Value sites run once per value space
    in ``value_spaces``; residual sites and diag_removal do not have one."""
    par_grid = frange(-2.0, 3.0, 0.25) if par_grid is None else list(par_grid)
    perp_grid = frange(0.0, 2.0, 0.25) if perp_grid is None else list(perp_grid)
    spaces = [check_value_space(v) for v in value_spaces]
    out = []
    for site in sites:
        for space in spaces if site in VALUE_SITES else [DEFAULT_VALUE_SPACE]:
            out += [ComponentScaleConfig(site, s, 1.0, value_space=space) for s in par_grid if s != 1.0]
            out += [ComponentScaleConfig(site, 1.0, s, value_space=space) for s in perp_grid if s != 1.0]
    out += [ComponentScaleConfig("value_full", 0.0, 1.0, value_space=v) for v in spaces]
    out += [ComponentScaleConfig("diag_removal", 1.0, 1.0)]
    # Coarse points (multiples of 0.5) first, so an interrupted sweep still spans the whole range;
    # ``run_sweep(resume=True)`` fills in the rest later.
    coarse = [c for c in out if (c.s_par * 2).is_integer() and (c.s_perp * 2).is_integer()]
    return coarse + [c for c in out if c not in coarse]


def setting_key(site: str, s_par: float, s_perp: float, value_space: str | None) -> tuple:
    """What identifies one sweep row: the site, both scales and, for ∥/⊥ value sites, the value space
    (a row written before value spaces were recorded was per head)."""
    has_space = site in ("value_full", "value_exclude_self")
    return (site, float(s_par), float(s_perp), (value_space or "head") if has_space else None)


def _row_space(cfg: ComponentScaleConfig) -> str | None:
    return setting_key(cfg.site, cfg.s_par, cfg.s_perp, cfg.value_space)[3]


def _earlier_rows(out: Path) -> list[dict]:
    """The rows an earlier run wrote to ``out`` (bounded reader); a file that is not such records is one line."""
    from geosteer.errors import GeosteerError
    from geosteer.io_utils import read_json

    doc = read_json(out, "sweep results file")
    rows = doc.get("rows", []) if isinstance(doc, dict) else None
    keys = {"site", "s_par", "s_perp"}
    if not isinstance(rows, list) or not all(isinstance(r, dict) and keys <= set(r) for r in rows):
        raise GeosteerError(f"sweep results file {out} holds no sweep records to resume from; give a new --out")
    return rows


def run_sweep(model, tok, ids: torch.Tensor, settings: Sequence[ComponentScaleConfig], out: str | Path,
              *, context: int = 512, stride: int = 256, batch_size: int = 2, meta: dict | None = None,
              resume: bool = True, log=print) -> list[dict]:
    """Baseline + each setting's strided PPL on ``ids``; tidy rows written to ``out`` after each setting."""

    out = Path(out)
    rows: list[dict] = []
    if resume and (out.exists() or out.is_symlink()) and out.suffix == ".json":
        rows = _earlier_rows(out)
    done = {setting_key(r["site"], r["s_par"], r["s_perp"], r.get("value_space")) for r in rows}
    meta = dict(meta or {}, context=context, stride=stride, tokens=int(ids.numel()))

    def evaluate(ivs) -> tuple[dict, float]:
        t0 = time.time()
        with steer(model, *ivs):
            res = strided_perplexity(model, tok, ids=ids, context=context, stride=stride,
                                     batch_size=batch_size)
        return res.to_dict(), time.time() - t0

    if setting_key("none", 1.0, 1.0, None) not in done:
        r, dt = evaluate([])
        rows.append({"site": "none", "s_par": 1.0, "s_perp": 1.0, "ppl": r["ppl"], "nll": r["nll"],
                     "tokens": r["tokens"], "delta_ppl": 0.0, "seconds": round(dt, 1)})
        write_records(out, rows, meta)
        log(f"baseline ppl {r['ppl']:.4f} ({dt:.0f} s)")
    base = next(r for r in rows if r["site"] == "none")["ppl"]
    todo = [c for c in settings if setting_key(c.site, c.s_par, c.s_perp, c.value_space) not in done]
    t_run = time.time()
    for i, cfg in enumerate(todo):
        r, dt = evaluate([ComponentScale.from_config(cfg)])
        rows.append({"site": cfg.site, "value_space": _row_space(cfg), "s_par": cfg.s_par,
                     "s_perp": cfg.s_perp, "ppl": r["ppl"], "nll": r["nll"], "tokens": r["tokens"],
                     "delta_ppl": r["ppl"] - base, "seconds": round(dt, 1)})
        write_records(out, rows, meta)
        space = f" ({_row_space(cfg)})" if _row_space(cfg) else ""
        log(f"[{counter(i + 1, len(todo), time.time() - t_run)}] {cfg.site}{space} s_par={cfg.s_par} "
            f"s_perp={cfg.s_perp}: ppl {r['ppl']:.4f} ({dt:.0f} s)")
    return rows
