"""Study: held-out perplexity vs s∥ and s⊥ per site (``geosteer study directional sweep``, paper Fig. 3)."""

from __future__ import annotations

from pathlib import Path

import typer

from geosteer.cli.common import DEVICE_OPT, DTYPE_OPT, MODEL_OPT, THREADS_OPT, check_positions, load, set_threads
from geosteer.cli.outputs import out_records
from geosteer.directional.config import DEFAULT_VALUE_SPACE


def sweep_cmd(
    model: str = MODEL_OPT,
    sites: str = typer.Option("value_exclude_self,attn_out,mlp_out", "--sites",
                              help="comma-separated sweep sites"),
    controls: bool = typer.Option(True, "--controls/--no-controls",
                                  help="add value_full and diag_removal at s_par = 0"),
    value_space: str = typer.Option(DEFAULT_VALUE_SPACE, "--value-space",
                                    help="value sites: head | concat | head,concat (both, one baseline)"),
    par_grid: str = typer.Option("paper", "--s-par-grid",
                                 help="s∥ values (s⊥ = 1): paper (-2:3:0.25) | lo:hi:step | 0,0.5,2 | none"),
    perp_grid: str = typer.Option("paper", "--s-perp-grid",
                                  help="s⊥ values (s∥ = 1): paper (0:2:0.25) | lo:hi:step | 0,0.5 | none"),
    tokens: int = typer.Option(2048, "--tokens", min=2, help="held-out tokens scored"),
    context: int = typer.Option(512, "--context"),
    stride: int = typer.Option(256, "--stride"),
    out: Path = typer.Option(Path("sweep.json"), "--out", callback=out_records()),
    threads: int = THREADS_OPT,
    device: str = DEVICE_OPT, dtype: str = DTYPE_OPT,
) -> None:
    """Study 1: held-out strided perplexity vs s∥ (s⊥ = 1) and vs s⊥ (s∥ = 1) per site (paper Figure 3)."""
    from geosteer.directional.config import check_site
    from geosteer.eval.perplexity import check_window, heldout_ids
    from geosteer.models.loading import model_id
    from geosteer_paper.directional.sweep import parse_grid, run_sweep, sweep_settings

    set_threads(threads)
    site_list = [check_site(s.strip()) for s in sites.split(",") if s.strip()]
    if not site_list:
        raise ValueError("--sites is empty: give comma-separated sweep sites")
    spaces = _value_spaces(value_space)
    pars, perps = parse_grid(par_grid, "--s-par-grid"), parse_grid(perp_grid, "--s-perp-grid")
    check_window(context, stride, prefix="--")
    check_positions(model, "--context", context)
    m, tok = load(model, threads=threads, device=device, dtype=dtype)
    settings = sweep_settings(site_list, pars, perps, spaces)
    if not controls:
        settings = [s for s in settings if s.site in site_list]
    ids = heldout_ids(tok, tokens)
    run_sweep(m, tok, ids, settings, out, context=context, stride=stride,
              meta={"model": model_id(m), "corpus": "heldout", "sites": site_list, "value_spaces": spaces})


def _value_spaces(spec: str) -> list[str]:
    """``--value-space head|concat|head,concat`` → the checked list (one line naming the valid ones)."""
    from geosteer.directional.config import check_value_space

    spaces = [check_value_space(v.strip()) for v in spec.split(",") if v.strip()]
    if not spaces or len(set(spaces)) != len(spaces):
        raise ValueError(f"--value-space {spec!r}: give head, concat or head,concat")
    return spaces
