"""``geosteer measure explore``: what a surfaces artifact does on its model: per-layer sensitivity, grid coverage
and wall leakage on held-out windows, the largest surfaces, one control net."""

from __future__ import annotations

from pathlib import Path

import typer

from geosteer.cli.common import (
    DEVICE_OPT,
    DTYPE_OPT,
    JSON_OPT,
    THREADS_OPT,
    check_layers,
    emit,
    model_config,
    set_threads,
)
from geosteer.cli.common import load as load_model  # `load` below is geosteer.manifold.load (surfaces)
from geosteer.cli.outputs import out_file, out_records
from geosteer.cli.preflight import check_artifact, check_prompt_positions, tokenizer_of
from geosteer.viz.cli import QK_PROMPT

SURF_OPT = typer.Option(..., "--surfaces", "-s", help="surfaces artifact folder")


def _check_before_load(name: str, layers: str | None, surfaces: Path, force: bool,
                       prompts: list[tuple[list[str], str]]) -> None:
    """--layers, the surfaces and the prompts against the model ``name``, before it loads (one line each)."""
    check_layers(name, "--layers", layers)
    check_artifact("surfaces", surfaces, name, force=force)
    for texts, what in prompts:  # longer than the model's positions
        check_prompt_positions(tokenizer_of(name), model_config(name), texts, what)


def explore_cmd(
    surfaces: Path = SURF_OPT,
    model: str = typer.Option(None, "--model", "-m", help="base model (default: the artifact's)"),
    prompts: str = typer.Option("steering_prompts", "--prompt-set",
                                help="bundled prompt set name or a JSON file (sensitivity prompts)"),
    prompt: list[str] = typer.Option(None, "--prompt", help="a prompt (repeatable; replaces --prompt-set)"),
    layers: str = typer.Option(None, "--layers", help="layers to ablate, e.g. 5-10 (default: all)"),
    top: int = typer.Option(10, "--top", min=0, help="largest surfaces to list"),
    net: str = typer.Option(None, "--net", help="print this surface's control net: LAYER,HEAD,DIM "
                            "(default: the largest surface)"),
    no_sensitivity: bool = typer.Option(False, "--no-sensitivity", help="skip the model runs"),
    windows: int = typer.Option(2, "--coverage-windows", min=0, max=1024,
                                help="held-out 128-token windows for grid coverage and wall leakage (0: skip them)"),
    out: Path = typer.Option(None, "--out", "-o", help="write the results as JSON", callback=out_file(".json")),
    record_qk: Path = typer.Option(None, "--record-qk", callback=out_records(),
                                   help="also record --qk-prompt's post-RoPE (q, k) self-pairs on the largest "
                                   "surfaces per layer into this file (tidy .json/.csv for `geosteer report`)"),
    qk_prompt: str = typer.Option(QK_PROMPT, "--qk-prompt", help="the prompt --record-qk records"),
    qk_top: int = typer.Option(8, "--qk-top", min=1, help="surfaces per layer --record-qk records (largest ‖C‖)"),
    threads: int = THREADS_OPT,
    device: str = DEVICE_OPT,
    dtype: str = DTYPE_OPT,
    force: bool = typer.Option(False, "--force", help="use the surfaces on --model even if they were "
                               "recorded for another base model"),
    as_json: bool = JSON_OPT,
) -> None:
    """Per-layer sensitivity (zero each layer, next-token KL), grid coverage and wall leakage on held-out
    windows, top-N surfaces by norm, one control net."""
    from geosteer.io_utils import atomic_write_json
    from geosteer.manifold import load, read_config
    from geosteer.manifold.edit import control_net
    from geosteer.manifold.explore import layer_norms, layer_sensitivity, top_surfaces

    if "" in (prompt or []):
        raise ValueError("--prompt is empty; give the text of a prompt")
    if record_qk is not None and not qk_prompt:
        raise ValueError("--qk-prompt is empty; give the text --record-qk records")
    set_threads(threads)
    doc = read_config(surfaces)
    bank = load(surfaces)
    tops = top_surfaces(bank, top)
    result: dict = {"artifact": str(surfaces), "top_surfaces": tops, "layer_norms": layer_norms(bank)}
    lhd = _net_target(net, tops)
    cn = None
    if lhd is not None:
        cn = control_net(bank, *lhd)
        result["control_net"] = {"layer": lhd[0], "head": lhd[1], "dim": lhd[2], "values": cn.tolist()}
    if not no_sensitivity or record_qk is not None:
        name = model or doc.get("base_model")
        if not name:
            raise ValueError("the artifact does not name its base model; pass --model")
        checks = [(list(prompt or []), "--prompt")] + ([([qk_prompt], "--qk-prompt")] if record_qk else [])
        _check_before_load(name, layers, surfaces, force, checks)
        m, tok = load_model(name, threads=threads, device=device, dtype=dtype)
        for texts, what in checks:
            check_prompt_positions(tok, m, texts, what)
        bank = load(surfaces, model=m, force=force)
    if record_qk is not None:
        from geosteer.viz.cli import record_qk_points

        result["record_qk"] = record_qk_points(m, tok, bank, surfaces, name, qk_prompt, qk_top, record_qk)
    if not no_sensitivity:
        from geosteer.eval.prompts import load_prompts
        from geosteer.models.anatomy import anatomy, parse_layers

        texts = list(prompt) if prompt else [p.text for p in load_prompts(prompts)]
        result["prompts"] = len(texts)
        layer_list = parse_layers(layers, anatomy(m).n_layers)
        result["sensitivity"] = layer_sensitivity(m, tok, bank, texts, layers=layer_list)
        if windows > 0:
            from geosteer.manifold.coverage import grid_coverage, heldout_windows, wall_leakage

            wins = heldout_windows(tok, windows)
            result["coverage"] = grid_coverage(m, tok, bank, wins)
            result["wall_leakage"] = wall_leakage(m, tok, bank, wins)
    if out is not None:
        atomic_write_json(out, result)
    if as_json:
        emit(result, True)
        return
    _print_explore(result, tops, lhd, cn, windows, out, record_qk)


def _net_target(net: str | None, tops: list[dict]) -> list[int] | None:
    """The (layer, head, dim) whose control net to print: --net's, else the largest surface's, else none."""
    if net:
        try:
            lhd = [int(x) for x in net.replace(" ", "").split(",")]
            assert len(lhd) == 3
        except (ValueError, AssertionError):
            raise ValueError(f"--net wants LAYER,HEAD,DIM (got '{net}')") from None
        return lhd
    return [tops[0]["layer"], tops[0]["head"], tops[0]["dim"]] if tops else None


def _print_explore(result: dict, tops: list[dict], lhd: list[int] | None, cn: object, windows: int,
                   out: Path | None, record_qk: Path | None) -> None:
    """The human-readable tables of `measure explore`."""
    from geosteer.manifold.edit import format_control_net

    if "sensitivity" in result:
        emit(result["sensitivity"], False,
             table_title=f"layer sensitivity: zero one layer's surfaces, next-token KL over {result['prompts']} "
                         "prompts")
    if result.get("coverage"):
        emit([{k: r[k] for k in ("layer", "lo", "hi", "outside", "q_outside", "k_outside", "worst_head_outside",
                                  "dims_mostly_outside")}
              for r in result["coverage"]], False,
             table_title=f"grid coverage: attention-mass fraction with q or k outside the grid lo..hi "
                         f"({windows} held-out windows of 128 tokens)")
    if result.get("wall_leakage"):
        emit(result["wall_leakage"], False, table_title="wall leakage: region attention mass that still passes "
             "value (passing = Σ a·|gain| / Σ a in the region)")
    emit(tops, False, table_title=f"largest {len(tops)} surfaces (Frobenius norm)")
    if lhd is not None:
        typer.echo(f"control net of layer {lhd[0]} head {lhd[1]} dim {lhd[2]} (rows = query axis, "
                   "columns = key axis):")
        typer.echo(format_control_net(cn))
    if out is not None:
        typer.echo(f"wrote {out}")
    if record_qk is not None:
        typer.echo(f"wrote {record_qk} (q/k points of {result['record_qk']['tokens']} tokens on "
                   f"{result['record_qk']['surfaces']} surfaces)")
