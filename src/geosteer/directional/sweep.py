"""The component-scaling sweep (``geosteer directional sweep``; paper Figure 3 / Table 1 controls):
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

from geosteer.directional.config import DEPRECATED_SITES, ComponentScaleConfig
from geosteer.io_utils import write_records
from geosteer.progress import counter

SWEEP_SITES = ("value_exclude_self", "attn_out", "mlp_out")


def frange(lo: float, hi: float, step: float) -> list[float]:
    n = int(round((hi - lo) / step))
    return [round(lo + i * step, 10) for i in range(n + 1)]


def sweep_settings(sites: Sequence[str] = SWEEP_SITES, par_grid: Sequence[float] | None = None,
                   perp_grid: Sequence[float] | None = None) -> list[ComponentScaleConfig]:
    """The paper's grid: s∥ ∈ [-2, 3] step 0.25 (s⊥ = 1) and s⊥ ∈ [0, 2] step 0.25 (s∥ = 1) per site,
    plus value_full and diag_removal at s∥ = 0 (Table 1 controls)."""
    par_grid = frange(-2.0, 3.0, 0.25) if par_grid is None else list(par_grid)
    perp_grid = frange(0.0, 2.0, 0.25) if perp_grid is None else list(perp_grid)
    out = []
    for site in sites:
        out += [ComponentScaleConfig(site, s, 1.0) for s in par_grid if s != 1.0]
        out += [ComponentScaleConfig(site, 1.0, s) for s in perp_grid if s != 1.0]
    out += [ComponentScaleConfig("value_full", 0.0, 1.0), ComponentScaleConfig("diag_removal", 1.0, 1.0)]
    # Coarse points (multiples of 0.5) first, so an interrupted sweep still spans the whole range;
    # ``run_sweep(resume=True)`` fills in the rest later.
    coarse = [c for c in out if (c.s_par * 2).is_integer() and (c.s_perp * 2).is_integer()]
    return coarse + [c for c in out if c not in coarse]


def run_sweep(model, tok, ids: torch.Tensor, settings: Sequence[ComponentScaleConfig], out: str | Path,
              *, context: int = 512, stride: int = 256, batch_size: int = 2, meta: dict | None = None,
              resume: bool = True, log=print) -> list[dict]:
    """Baseline + each setting's strided PPL on ``ids``; tidy rows written to ``out`` after each setting."""
    import json

    from geosteer.directional.sites import ComponentScale
    from geosteer.eval.perplexity import strided_perplexity
    from geosteer.interventions import steer

    out = Path(out)
    rows: list[dict] = []
    if resume and out.is_file() and out.suffix == ".json":
        rows = json.loads(out.read_text()).get("rows", [])
    for r in rows:  # a results file written before the residual sites took their hook-point names
        r["site"] = DEPRECATED_SITES.get(r["site"], r["site"])
    done = {(r["site"], r["s_par"], r["s_perp"]) for r in rows}
    meta = dict(meta or {}, context=context, stride=stride, tokens=int(ids.numel()))

    def evaluate(ivs) -> tuple[dict, float]:
        t0 = time.time()
        with steer(model, *ivs):
            res = strided_perplexity(model, tok, ids=ids, context=context, stride=stride,
                                     batch_size=batch_size)
        return res.to_dict(), time.time() - t0

    if ("none", 1.0, 1.0) not in done:
        r, dt = evaluate([])
        rows.append({"site": "none", "s_par": 1.0, "s_perp": 1.0, "ppl": r["ppl"], "nll": r["nll"],
                     "tokens": r["tokens"], "delta_ppl": 0.0, "seconds": round(dt, 1)})
        write_records(out, rows, meta)
        log(f"baseline ppl {r['ppl']:.4f} ({dt:.0f} s)")
    base = next(r for r in rows if r["site"] == "none")["ppl"]
    todo = [c for c in settings if (c.site, c.s_par, c.s_perp) not in done]
    t_run = time.time()
    for i, cfg in enumerate(todo):
        r, dt = evaluate([ComponentScale.from_config(cfg)])
        rows.append({"site": cfg.site, "s_par": cfg.s_par, "s_perp": cfg.s_perp, "ppl": r["ppl"],
                     "nll": r["nll"], "tokens": r["tokens"], "delta_ppl": r["ppl"] - base,
                     "seconds": round(dt, 1)})
        write_records(out, rows, meta)
        log(f"[{counter(i + 1, len(todo), time.time() - t_run)}] {cfg.site} s_par={cfg.s_par} "
            f"s_perp={cfg.s_perp}: ppl {r['ppl']:.4f} ({dt:.0f} s)")
    return rows
