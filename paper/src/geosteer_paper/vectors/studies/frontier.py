"""``geosteer study vectors frontier``: target shift vs control KL and perplexity, per lever and strength.

Writes the tidy records (``--out`` .json: rows + meta, and the same rows as .csv beside it) and one
frontier figure per behaviour (``<out stem>_<behaviour>.html``, and ``.png`` when kaleido is installed).
Points are cached under ``--cache`` as they are measured: run the same command again to resume.
"""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import typer

from geosteer.cli.common import DEVICE_OPT, DTYPE_OPT, MODEL_OPT, THREADS_OPT, load, set_threads
from geosteer.cli.outputs import out_dir, out_file

COLORS = {"CAA": "#1f77b4", "learned steering surfaces": "#d62728", "learned walls": "#9467bd",
          "surfaces edits": "#8c564b", "directional ∥/⊥": "#2ca02c", "FFN edits": "#ff7f0e",
          "learned ∥/⊥ scales": "#17becf",
          "reference": "#000000", "stock model": "#7f7f7f"}


def _floats(text: str, option: str) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{option} wants comma-separated numbers (got {text!r})") from None
    if not vals:
        raise ValueError(f"{option} is empty: give comma-separated numbers")
    return vals


def _reuse(items: list[str]) -> dict:
    out = {}
    for it in items:
        key, eq, folder = it.partition("=")
        parts = key.split(":")
        if not eq or len(parts) != 3 or parts[1] not in ("dense", "walls"):
            raise ValueError(f"--reuse wants BEHAVIOUR:dense|walls:TAU=FOLDER (got {it!r})")
        try:
            float(parts[2])
        except ValueError:
            raise ValueError(f"--reuse: the KL budget {parts[2]!r} is not a number (in {it!r})") from None
        if not (Path(folder) / "geosteer_config.json").is_file():
            raise ValueError(f"--reuse: {folder} is not a surfaces artifact folder")
        out[key] = folder
    return out


_DASHES = ("solid", "dash", "dot", "dashdot")


def _symbol(lever: str, layer) -> str:
    return ("circle", "square", "diamond", "triangle-up")[(layer or 0) % 4] if lever == "CAA" else "circle"


def frontier_figure(rows: list[dict], behaviour: str):
    """Target shift (± bootstrap interval) vs control next-token KL, one trace per lever (CAA per layer)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    groups: dict = {}
    for r in rows:
        if r["behaviour"] != behaviour or r["lever"] == "reference":  # the reference is the origin (KL 0)
            continue
        name = f"CAA layer {r['layer']}" if r["lever"] == "CAA" else r["lever"]
        groups.setdefault((r["lever"], name), []).append(r)
    for (lever, name), rs in groups.items():
        rs = sorted(rs, key=lambda r: r["control_kl"]) if lever != "CAA" else sorted(rs, key=lambda r: r["strength"])
        fig.add_trace(go.Scatter(
            x=[max(r["control_kl"], 1e-6) for r in rs], y=[r["target_shift"] for r in rs],
            mode="lines+markers" if lever == "CAA" else "markers", name=name,
            marker={"color": COLORS.get(lever), "size": 9, "symbol": _symbol(lever, rs[0].get("layer"))},
            line={"dash": _DASHES[(rs[0].get("layer") or 0) % len(_DASHES)]} if lever == "CAA" else None,
            error_y={"type": "data", "symmetric": False,
                     "array": [r["target_shift_hi"] - r["target_shift"] for r in rs],
                     "arrayminus": [r["target_shift"] - r["target_shift_lo"] for r in rs]},
            text=[f"{r['lever']}: {r['setting']}<br>ppl x{r['ppl_ratio']:.4f}" for r in rs], hoverinfo="text+x+y"))
    fig.update_layout(title=f"steering frontier: {behaviour} (held-out prompts, 95 % bootstrap intervals)",
                      xaxis={"title": "control next-token KL (nats, log scale)", "type": "log"},
                      yaxis={"title": "target shift (nats, towards the behaviour)"}, height=560, width=900)
    return fig


def write_figures(rows: list[dict], out: Path) -> list[Path]:
    """One HTML figure per behaviour beside ``out`` (and a PNG when kaleido can draw one)."""
    paths = []
    for b in dict.fromkeys(r["behaviour"] for r in rows):
        fig = frontier_figure(rows, b)
        html = out.with_name(f"{out.stem}_{b}.html")
        fig.write_html(str(html), include_plotlyjs="cdn")
        paths.append(html)
        try:
            png = html.with_suffix(".png")
            fig.write_image(str(png))
            paths.append(png)
        except Exception:  # noqa: BLE001 - the PNG is optional (kaleido and a browser may be missing)
            pass
    return paths


def frontier_cmd(
    model: str = MODEL_OPT,
    surfaces: Path = typer.Option(Path("artifacts/smollm2-surfaces"), "--surfaces",
                                 help="reference surfaces (every lever is measured against them attached)"),
    behaviours: str = typer.Option("sentiment,elements", "--behaviours",
                                   help="sentiment and/or learned-walls prompt categories (elements, mischief)"),
    caa_layers: str = typer.Option("5,15,25", "--caa-layers", help="CAA layers"),
    caa_multipliers: str = typer.Option("0.125,0.25,0.5,1", "--caa-multipliers"),
    steer_taus: str = typer.Option("0.02,0.1", "--steer-taus", help="KL budgets of the learned steering surfaces"),
    steer_steps: int = typer.Option(10, "--steer-steps", min=1),
    wall_taus: str = typer.Option("0.02", "--wall-taus", help="KL budgets of the learned walls"),
    wall_steps: int = typer.Option(20, "--wall-steps", min=1),
    reuse: list[str] = typer.Option([], "--reuse", help="BEHAVIOUR:dense|walls:TAU=FOLDER: an existing run"),
    edit_top: int = typer.Option(16, "--edit-top", min=1, help="surfaces scaled by the surfaces-edits lever"),
    ppl_tokens: int = typer.Option(1024, "--ppl-tokens", min=2, help="held-out corpus tokens scored"),
    levers: str = typer.Option(",".join(("CAA", "learned steering surfaces", "learned walls", "surfaces edits",
                                         "directional", "learned scales", "FFN edits")), "--levers"),
    scale_taus: str = typer.Option("0.02", "--scale-taus", help="KL budgets of the learned ∥/⊥ scales"),
    scale_steps: int = typer.Option(10, "--scale-steps", min=1),
    cached_only: bool = typer.Option(False, "--cached-only", help="only the points already in --cache"),
    seed: int = typer.Option(0, "--seed", help="bootstrap seed (the training runs are full-batch, seed 0)"),
    cache: Path = typer.Option(Path("frontier.cache"), "--cache", callback=out_dir(),
                               help="per-point results and training runs (resume by running again)"),
    out: Path = typer.Option(Path("frontier.json"), "--out", callback=out_file(".json")),
    threads: int = THREADS_OPT, device: str = DEVICE_OPT, dtype: str = DTYPE_OPT,
) -> None:
    """Steering frontier: each lever at several strengths on two behaviours' held-out prompts."""
    from geosteer.io_utils import atomic_write_csv, write_records
    from geosteer.models.loading import model_id
    from geosteer_paper.vectors.frontier_study import Plan, bundled_behaviour, run_frontier

    plan = Plan(levers=[x.strip() for x in levers.split(",") if x.strip()],
                caa_layers=[int(x) for x in _floats(caa_layers, "--caa-layers")],
                caa_multipliers=_floats(caa_multipliers, "--caa-multipliers"),
                steer_taus=_floats(steer_taus, "--steer-taus"), steer_steps=steer_steps,
                wall_taus=_floats(wall_taus, "--wall-taus"), wall_steps=wall_steps, reuse=_reuse(reuse),
                scale_taus=_floats(scale_taus, "--scale-taus"), scale_steps=scale_steps, cached_only=cached_only,
                edit_top=edit_top, ppl_tokens=ppl_tokens, seed=seed)
    bs = [bundled_behaviour(b.strip()) for b in behaviours.split(",") if b.strip()]
    if not bs:
        raise ValueError("--behaviours is empty: give sentiment and/or a learned-walls prompt category")
    if not (surfaces / "geosteer_config.json").is_file():
        raise ValueError(f"--surfaces: {surfaces} is not a surfaces artifact folder")
    set_threads(threads)
    t0 = time.perf_counter()
    m, tok = load(model, threads=threads, device=device, dtype=dtype)
    res = run_frontier(m, tok, bs, plan, cache, surfaces=str(surfaces),
                       log=lambda s: print(s, file=sys.stderr, flush=True))
    meta = {"model": model_id(m), "surfaces": str(surfaces), "behaviours": res["behaviours"], "plan": res["plan"],
            "matched_kl": res["matched_kl"],
            "bootstrap": {"resamples": 2000, "seed": seed, "interval": "95 % percentile"},
            "command": "geosteer " + shlex.join(sys.argv[1:]), "seconds": round(time.perf_counter() - t0, 1),
            "threads": threads}
    write_records(out, res["records"], meta)
    atomic_write_csv(out.with_suffix(".csv"), [{k: v for k, v in r.items() if k != "extra"} for r in res["records"]])
    figs = write_figures(res["records"], out)
    print(f"wrote {out}, {out.with_suffix('.csv')}, " + ", ".join(map(str, figs)), file=sys.stderr)
