"""CLI verbs for the localisation studies: ``diagonal`` (Table 5 / Fig. 4), ``heads`` (Fig. 7),
``strength`` (Table 6) and ``plot`` (redraw a figure from a result file)."""

from __future__ import annotations

from pathlib import Path

import typer

from geosteer.cli.common import (
    DEVICE_OPT,
    DTYPE_OPT,
    MODEL_OPT,
    THREADS_OPT,
    check_head_list,
    check_layers,
    check_positions,
    load,
)
from geosteer.cli.outputs import HTML, out_file, out_records

_SMALL = dict(help="'all', '3', '0-5', '0-5,9'")


def _setup(model: str, threads: int | None, device: str, dtype: str):
    return load(model, threads=threads, device=device, dtype=dtype)


def _save_figure(fig, path: Path) -> None:
    """HTML (plotly.js from the CDN) at ``path``; a PNG beside it when kaleido can render one."""
    from geosteer.io_utils import atomic_write_bytes, atomic_write_text

    atomic_write_text(path, fig.to_html(include_plotlyjs="cdn", full_html=True))
    try:
        png = fig.to_image(format="png", width=int(fig.layout.width or 1000), height=int(fig.layout.height or 500))
    except Exception:  # noqa: BLE001 - optional: no kaleido/browser here
        return
    atomic_write_bytes(path.with_suffix(".png"), png)


def diagonal_cmd(
    model: str = MODEL_OPT,
    tokens: int = typer.Option(64, "--tokens", min=2, help="held-out tokens (one sequence)"),
    layers: str = typer.Option("all", "--layers", **_SMALL),
    s_par: float = typer.Option(0.0, "--s-par", help="s∥ of the edit the diagonal change realises"),
    value_space: str = typer.Option("head", "--value-space", help="head | concat"),
    map_layer: int | None = typer.Option(None, "--map-layer", help="layer of the Fig. 4 maps (default: 2/3 depth)"),
    map_head: int = typer.Option(0, "--map-head", help="head of the Fig. 4 maps"),
    out: Path = typer.Option(Path("diagonal.json"), "--out", callback=out_records()),
    figure: Path | None = typer.Option(None, "--figure", help="write the Fig. 4 maps (.html, + .png)",
                                       callback=out_file(*HTML)),
    threads: int = THREADS_OPT,
    device: str = DEVICE_OPT, dtype: str = DTYPE_OPT,
) -> None:
    """Distribution of the closed-form diagonal change ΔA_tt per layer and form, and one head's maps."""
    from geosteer.directional.config import VALUE_SPACES, check_heads, check_scale, parse_layers
    from geosteer.errors import GeosteerError
    from geosteer.eval.perplexity import heldout_ids
    from geosteer.io_utils import write_records
    from geosteer.models.anatomy import anatomy
    from geosteer.models.loading import model_id
    from geosteer_paper.directional.views import diagonal_study

    check_scale("s_par", s_par)
    if value_space not in VALUE_SPACES:
        raise GeosteerError(f"unknown value space '{value_space}'; valid: {', '.join(VALUE_SPACES)}")
    check_layers(model, "--layers", layers)
    if map_layer is not None:
        check_layers(model, "--map-layer", str(map_layer))
    check_head_list(model, "--map-head", map_head)
    check_positions(model, "--tokens", tokens)
    m, tok = _setup(model, threads, device, dtype)
    an = anatomy(m)
    layer_list = parse_layers(layers, an.n_layers)
    if map_layer is None:
        map_layer = an.n_layers * 2 // 3
    parse_layers([map_layer], an.n_layers)
    check_heads([map_head], an.n_heads)
    if layer_list is not None and map_layer not in layer_list:
        layer_list = sorted([*layer_list, map_layer])
    ids = heldout_ids(tok, tokens)[None]
    rows, maps = diagonal_study(m, ids, layer_list, s_par, map_layer, map_head, value_space)
    meta = {"model": model_id(m), "tokens": int(ids.shape[1]), "s_par": s_par, "value_space": value_space,
            "map_layer": map_layer, "map_head": map_head}
    write_records(out, rows, meta)
    maps_path = out.with_name(out.stem + "_maps.json")
    write_records(maps_path, maps, meta)
    print(f"wrote {out} ({len(rows)} rows) and {maps_path}")
    for form in ("residual", "value_exclude_self", "value_full"):
        sel = [r for r in rows if r["form"] == form]
        if sel:
            print(f"{form}: dA_tt min {min(r['min'] for r in sel):+.3f} q01 {min(r['q01'] for r in sel):+.3f} "
                  f"q99 {max(r['q99'] for r in sel):+.3f} max {max(r['max'] for r in sel):+.3f}")
    if figure is not None:
        from geosteer.viz.results import load_tidy
        from geosteer_paper.directional.figures import diagonal_maps_figure

        _save_figure(diagonal_maps_figure(load_tidy(maps_path).rows), figure)


def heads_cmd(
    model: str = MODEL_OPT,
    site: str = typer.Option("value_exclude_self", "--site", help="value_full | value_exclude_self"),
    s_par: float = typer.Option(0.0, "--s-par"),
    layers: str = typer.Option("all", "--layers", **_SMALL),
    heads: str = typer.Option("all", "--heads", help="single heads to try: 'all', '0-3', '0,5'"),
    texts: int = typer.Option(4, "--texts", min=1, max=4096, help="fixed held-out sequences"),
    text_len: int = typer.Option(128, "--text-len", min=2, help="tokens per sequence"),
    out: Path = typer.Option(Path("heads.json"), "--out", callback=out_records()),
    figure: Path | None = typer.Option(None, "--figure", help="write the Fig. 7 curve (.html, + .png)",
                                       callback=out_file(*HTML)),
    threads: int = THREADS_OPT,
    device: str = DEVICE_OPT, dtype: str = DTYPE_OPT,
) -> None:
    """Fig. 7: single-head vs joint all-head s∥ edit per layer (Δ next-token loss on fixed texts)."""
    from geosteer.directional.config import check_heads, check_scale, check_site, parse_heads, parse_layers
    from geosteer.errors import GeosteerError
    from geosteer.eval.perplexity import heldout_ids
    from geosteer.io_utils import write_records
    from geosteer.models.anatomy import anatomy
    from geosteer.models.loading import model_id
    from geosteer_paper.directional.views import head_localisation, head_summary

    if check_site(site) not in ("value_full", "value_exclude_self"):
        raise GeosteerError(f"head localisation needs a value site (value_full, value_exclude_self), not '{site}'")
    check_scale("s_par", s_par)
    head_sel = parse_heads(heads)
    if texts < 1 or text_len < 2:
        raise GeosteerError("--texts must be >= 1 and --text-len >= 2")
    check_layers(model, "--layers", layers)
    check_head_list(model, "--heads", heads)
    check_positions(model, "--text-len", text_len)
    m, tok = _setup(model, threads, device, dtype)
    an = anatomy(m)
    layer_list = parse_layers(layers, an.n_layers)
    check_heads(head_sel, an.n_heads)
    ids = heldout_ids(tok, texts * text_len)
    if ids.numel() < texts * text_len:
        raise GeosteerError(f"the held-out split has only {ids.numel()} tokens")
    ids = ids.reshape(texts, text_len)
    rows = head_localisation(m, ids, site, s_par, layer_list, head_sel)
    meta = {"model": model_id(m), "texts": texts, "text_len": text_len, "site": site, "s_par": s_par,
            "summary": head_summary(rows)}
    write_records(out, rows, meta)
    print(f"wrote {out} ({len(rows)} rows)")
    if figure is not None:
        from geosteer.viz.results import load_tidy
        from geosteer_paper.directional.figures import head_localisation_figure

        _save_figure(head_localisation_figure(load_tidy(out).rows), figure)


def strength_cmd(
    model: str = MODEL_OPT,
    sites: str = typer.Option("attn_out,value_exclude_self,value_full", "--sites"),
    s_par: float = typer.Option(0.0, "--s-par"),
    layers: str = typer.Option("all", "--layers", **_SMALL),
    tokens: int = typer.Option(512, "--tokens", min=2),
    value_space: str = typer.Option("head", "--value-space", help="value sites: head | concat"),
    out: Path = typer.Option(Path("strength.json"), "--out", callback=out_records()),
    threads: int = THREADS_OPT,
    device: str = DEVICE_OPT, dtype: str = DTYPE_OPT,
) -> None:
    """Table 6: perturbation norm, energy and retained norm at the post-W_O output of each edit."""
    from geosteer.directional.config import check_scale, check_site, parse_layers
    from geosteer.errors import GeosteerError
    from geosteer.eval.perplexity import heldout_ids
    from geosteer.io_utils import write_records
    from geosteer.models.anatomy import anatomy
    from geosteer.models.loading import model_id
    from geosteer_paper.directional.views import applied_strength

    site_list = [check_site(s.strip()) for s in sites.split(",") if s.strip()]
    if not site_list:
        raise GeosteerError("--sites is empty: give some of attn_out, value_full, value_exclude_self")
    bad = [s for s in site_list if s not in ("attn_out", "value_full", "value_exclude_self")]
    if bad:
        raise GeosteerError("applied strength is defined for attn_out, value_full, value_exclude_self "
                            f"(not '{bad[0]}')")
    check_scale("s_par", s_par)
    from geosteer.directional.config import VALUE_SPACES

    if value_space not in VALUE_SPACES:
        raise GeosteerError(f"unknown value space '{value_space}'; valid: {', '.join(VALUE_SPACES)}")
    check_layers(model, "--layers", layers)
    check_positions(model, "--tokens", tokens)
    m, tok = _setup(model, threads, device, dtype)
    layer_list = parse_layers(layers, anatomy(m).n_layers)
    ids = heldout_ids(tok, tokens)[None]
    rows = applied_strength(m, ids, site_list, s_par, layer_list, value_space)
    write_records(out, rows, {"model": model_id(m), "tokens": int(ids.shape[1]), "s_par": s_par,
                              "value_space": value_space})
    for r in rows:
        if r["layer"] == -1:
            print(f"{r['site']} ({r['value_space']}): perturbation norm {100 * r['perturb_norm']:.2f}%, energy "
                  f"{100 * r['perturb_energy']:.2f}%, retained norm {100 * r['retained_norm']:.2f}%")


def mlp_internal_cmd(
    model: str = MODEL_OPT,
    layers: str = typer.Option("all", "--layers", **_SMALL),
    texts: int = typer.Option(4, "--texts", min=1, max=4096, help="fixed held-out sequences"),
    text_len: int = typer.Option(128, "--text-len", min=2, help="tokens per sequence"),
    out: Path = typer.Option(Path("mlp_internal.json"), "--out", callback=out_records()),
    threads: int = THREADS_OPT,
    device: str = DEVICE_OPT, dtype: str = DTYPE_OPT,
) -> None:
    """Table 10: Δloss of Full No-Para / No-Perp at the residual MLP output and the MLP-internal sites."""
    from geosteer.directional.config import parse_layers
    from geosteer.errors import GeosteerError
    from geosteer.eval.perplexity import heldout_ids
    from geosteer.io_utils import write_records
    from geosteer.models.anatomy import anatomy
    from geosteer.models.loading import model_id
    from geosteer_paper.directional.mlp_internal import MLPInternalScale, mlp_internal_study

    if texts < 1 or text_len < 2:
        raise GeosteerError("--texts must be >= 1 and --text-len >= 2")
    check_layers(model, "--layers", layers)
    check_positions(model, "--text-len", text_len)
    m, tok = _setup(model, threads, device, dtype)
    layer_list = parse_layers(layers, anatomy(m).n_layers)
    ids = heldout_ids(tok, texts * text_len)
    if ids.numel() < texts * text_len:
        raise GeosteerError(f"the held-out split has only {ids.numel()} tokens")
    ids = ids.reshape(texts, text_len)
    rows = mlp_internal_study(m, ids, layer_list)
    cov = MLPInternalScale.coverage(m)
    write_records(out, rows, {"model": model_id(m), "texts": texts, "text_len": text_len,
                              "carrier_coverage": cov})
    print(f"carrier coordinates in full d-groups (edited): {100 * cov:.1f}%")
    for r in rows:
        print(f"{r['geometry']} {r['setting']}: delta loss {r['delta_loss']:+.4f}")


def plot_cmd(
    kind: str = typer.Argument(..., help="diagonal | heads"),
    result: Path = typer.Argument(..., help="the tidy result file (diagonal: the *_maps.json file)"),
    out: Path = typer.Option(..., "--out", help="figure file (.html; a .png beside it when possible)",
                              callback=out_file(*HTML)),
) -> None:
    """Redraw Fig. 4 (diagonal maps) or Fig. 7 (head localisation) from a result file."""
    from geosteer.errors import GeosteerError
    from geosteer.viz.results import load_tidy
    from geosteer_paper.directional.figures import diagonal_maps_figure, head_localisation_figure

    draw = {"diagonal": diagonal_maps_figure, "heads": head_localisation_figure}.get(kind)
    if draw is None:
        raise GeosteerError(f"unknown figure kind '{kind}'; valid: diagonal, heads")
    _save_figure(draw(load_tidy(result).rows), out)
