"""``geosteer manifold ...``: show, edit and explore surface artifacts (``train`` comes from train.py)."""

from __future__ import annotations

from pathlib import Path

import typer

man = typer.Typer(no_args_is_help=True,
                  help="Attention manifolds: learned B-spline value-modulation surfaces (issue 3).")

SURF_OPT = typer.Option(..., "--surfaces", "-s", help="surfaces artifact folder")
JSON_OPT = typer.Option(False, "--json", help="print JSON")


def _layers(spec: str | None) -> list[int] | None:
    from geosteer.manifold.edit import parse_values

    if spec is None or spec.strip() in ("", "all"):
        return None
    return parse_values(spec)


@man.command("show")
def show_cmd(surfaces: Path = SURF_OPT, top: int = typer.Option(5, "--top", help="largest surfaces to list"),
             as_json: bool = JSON_OPT) -> None:
    """What an artifact holds: base model, shapes, grid, ranges, training, edit history, largest surfaces."""
    from geosteer.cli import emit
    from geosteer.manifold import load, read_config
    from geosteer.manifold.explore import top_surfaces

    doc = read_config(surfaces)
    bank = load(surfaces)
    training = (doc.get("meta") or {}).get("training") or {}
    info = {
        "artifact": str(surfaces), "base_model": doc.get("base_model"), "shape": doc.get("shape"),
        "grid_size": doc.get("grid_size"), "layers": _fmt(bank.layers),
        "ranges": _ranges(bank), "parameters": bank.n_parameters(), "storage_dtype": doc.get("storage_dtype"),
        "training_tokens": training.get("tokens"), "heldout_ppl": _ppl(training), "edits": len(bank.history),
        "walls": len(bank.walls),
        "created": doc.get("created"), "commit": doc.get("commit"),
    }
    tops = top_surfaces(bank, top)
    if as_json:
        emit({**info, "history": bank.history, "wall_regions": [w.to_dict() for w in bank.walls],
              "top_surfaces": tops}, True)
        return
    emit(info, False)
    for w in bank.walls:
        typer.echo(f"  exact {w.describe()}")
    for h in bank.history:
        typer.echo(f"  edit: {h.get('edit')} ({h.get('surfaces')} surfaces, "
                   f"{h.get('coefficients')} coefficients)")
    if tops:
        emit(tops, False, table_title=f"largest {len(tops)} surfaces (Frobenius norm)")


def _fmt(layers) -> str:
    from geosteer.manifold.bank import _fmt_layers

    return _fmt_layers(layers)


def _ranges(bank) -> str:
    pairs = sorted({(round(float(a), 4), round(float(b), 4)) for a, b in zip(bank.lo, bank.hi, strict=True)})
    if len(pairs) == 1:
        return f"[{pairs[0][0]:g}, {pairs[0][1]:g}] (all layers)"
    return f"per layer, {min(p[0] for p in pairs):g}…{max(p[1] for p in pairs):g}"


def _ppl(training: dict):
    h = training.get("heldout") or {}
    if h.get("ppl_before") is None:
        return None
    return f"{h['ppl_before']:.4g} -> {h['ppl_after']:.4g}"


@man.command("edit")
def edit_cmd(
    ops: list[str] = typer.Argument(..., help="edits, e.g. 'invert layer=8' 'scale=0.5 layer=8 head=3 "
                                    "dim=25' 'invert layer=8 head=2 dim=4 rows=5-10' 'set=1.5 layer=8 "
                                    "head=2 dim=4 row=5 col=5' 'wall layer=10' 'wall layer=10 top=8'"),
    surfaces: Path = SURF_OPT,
    out: Path = typer.Option(..., "--out", "-o", help="artifact folder to write (may equal --surfaces)"),
    dtype: str = typer.Option(None, "--dtype", help="storage float32|float16 (default: as the input)"),
    as_json: bool = JSON_OPT,
) -> None:
    """Edit surfaces (scale/invert/zero/set/wall on surfaces, heads, layers, rows/columns, top-N norms)."""
    from geosteer.cli import emit
    from geosteer.manifold import load, read_config, save
    from geosteer.manifold.edit import apply_edits

    doc = read_config(surfaces)
    bank = load(surfaces)
    records = apply_edits(bank, ops)
    save(bank, out, dtype=dtype or doc.get("storage_dtype") or "float32")
    rows = [{"edit": r["edit"], "surfaces": r["surfaces"], "coefficients": r["coefficients"]}
            for r in records]
    if as_json:
        emit({"out": str(out), "edits": records}, True)
    else:
        emit(rows, False, table_title=f"applied to {surfaces} -> {out}")


@man.command("explore")
def explore_cmd(
    surfaces: Path = SURF_OPT,
    model: str = typer.Option(None, "--model", "-m", help="base model (default: the artifact's)"),
    prompts: str = typer.Option("steering_prompts", "--prompts",
                                help="bundled prompt set name or a JSON file (sensitivity prompts)"),
    prompt: list[str] = typer.Option(None, "--prompt", help="a prompt (repeatable; replaces --prompts)"),
    layers: str = typer.Option(None, "--layers", help="layers to ablate, e.g. 5-10 (default: all)"),
    top: int = typer.Option(10, "--top", help="largest surfaces to list"),
    net: str = typer.Option(None, "--net", help="print this surface's control net: LAYER,HEAD,DIM "
                            "(default: the largest surface)"),
    no_sensitivity: bool = typer.Option(False, "--no-sensitivity", help="skip the model runs"),
    windows: int = typer.Option(2, "--coverage-windows", help="held-out 128-token windows for grid coverage "
                                "and wall leakage (0: skip them)"),
    out: Path = typer.Option(None, "--out", "-o", help="write the results as JSON"),
    threads: int = typer.Option(None, "--threads", help="torch CPU threads"),
    force: bool = typer.Option(False, "--force", help="use the surfaces on --model even if they were "
                               "recorded for another base model"),
    as_json: bool = JSON_OPT,
) -> None:
    """Per-layer sensitivity (zero each layer, next-token KL), grid coverage and wall leakage on held-out
    windows, top-N surfaces by norm, one control net."""
    import torch

    from geosteer.cli import emit
    from geosteer.io_utils import atomic_write_json
    from geosteer.manifold import load, read_config
    from geosteer.manifold.edit import control_net, format_control_net
    from geosteer.manifold.explore import layer_norms, layer_sensitivity, top_surfaces

    if threads:
        torch.set_num_threads(threads)
    doc = read_config(surfaces)
    bank = load(surfaces)
    tops = top_surfaces(bank, top)
    result: dict = {"artifact": str(surfaces), "top_surfaces": tops, "layer_norms": layer_norms(bank)}
    if net:
        try:
            lhd = [int(x) for x in net.replace(" ", "").split(",")]
            assert len(lhd) == 3
        except (ValueError, AssertionError):
            raise ValueError(f"--net wants LAYER,HEAD,DIM (got '{net}')") from None
    elif tops:
        lhd = [tops[0]["layer"], tops[0]["head"], tops[0]["dim"]]
    else:
        lhd = None
    if lhd is not None:
        cn = control_net(bank, *lhd)
        result["control_net"] = {"layer": lhd[0], "head": lhd[1], "dim": lhd[2], "values": cn.tolist()}
    if not no_sensitivity:
        from geosteer import load_model
        from geosteer.eval.prompts import load_prompts

        texts = list(prompt) if prompt else [p.text for p in load_prompts(prompts)]
        name = model or doc.get("base_model")
        if not name:
            raise ValueError("the artifact does not name its base model; pass --model")
        m, tok = load_model(name)
        bank = load(surfaces, model=m, force=force)
        result["prompts"] = len(texts)
        result["sensitivity"] = layer_sensitivity(m, tok, bank, texts, layers=_layers(layers))
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
    if "sensitivity" in result:
        emit([{k: v for k, v in r.items()} for r in result["sensitivity"]], False,
             table_title=f"layer sensitivity: zero one layer's surfaces, next-token KL over {len(texts)} "
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


def register(app: typer.Typer) -> None:
    try:
        from geosteer.manifold.train import train_command
    except ModuleNotFoundError as e:
        if e.name != "geosteer.manifold.train":
            raise
    else:
        train_command(man)
    app.add_typer(man, name="manifold")
