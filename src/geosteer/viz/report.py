"""Self-contained HTML reports: plotly.js embedded once, inline, so the file opens offline.

``build_report(paths, out)`` takes tidy result files, surface artifact folders, recorded q/k files
(``geosteer measure explore --record-qk``) and folders of them; every figure comes from the files.
"""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

try:
    import plotly.graph_objects as go
    import plotly.io as pio
except ModuleNotFoundError as _e:  # without the optional extra: one line naming it
    from geosteer.extras import missing

    raise missing(_e) from None

from geosteer.artifacts import CONFIG_NAME
from geosteer.errors import GeosteerError
from geosteer.io_utils import atomic_write_text
from geosteer.manifold import load as load_surfaces
from geosteer.methods import is_artifact
from geosteer.viz import figures as F
from geosteer.viz.results import TidyResult, auto_figures, load_tidy, table_html


@dataclass
class Section:
    title: str
    figures: list[go.Figure] = field(default_factory=list)
    html: str = ""  # extra (escaped) HTML: tables, notes
    source: str = ""


def expand_inputs(paths: list[str | Path]) -> list[Path]:
    """Files and artifact folders, with plain folders expanded to their ``.json``/``.csv`` files."""
    out: list[Path] = []
    for p in map(Path, paths):
        if not p.exists():
            raise GeosteerError(f"not found: {p}")
        if is_artifact(p) or not p.is_dir():  # a FIFO or device too: its reader refuses it in one line
            out.append(p)
            continue
        arts = sorted(a.parent for a in p.rglob(CONFIG_NAME))
        found = sorted(x for x in p.rglob("*") if x.is_file() and x.suffix.lower() in (".json", ".csv")
                       and not any(a == x.parent or a in x.parents for a in arts))
        out.extend(arts)
        out.extend(found)
        if not found and not arts:
            raise GeosteerError(f"{p}: no .json/.csv result files or surface artifacts inside")
    return out


def surface_sections(surfaces, qk: TidyResult | None, name: str, top: int = 8) -> list[Section]:
    """Figures of a ``SurfaceBank`` (loaded from its artifact without a model) and optional q/k dots."""
    from geosteer.viz import surfaces as S

    rows = qk.rows if qk is not None else []

    def pts(layer, head, dim):
        if not rows:
            return None
        labels, q, k = S.points_from_rows(rows, layer, head, dim)
        return S.token_points(surfaces, layer, head, dim, labels, q, k) if labels else None

    norms = S.surface_norms(surfaces)
    layers = S.bank_layers(surfaces)
    secs = [Section(f"{name}: surface norms", [F.norms_figure(norms, layers=layers)])]
    best = S.top_surfaces(surfaces, 1)
    if not best or best[0][3] == 0.0:
        secs[0].html = "<p class='note'>all surfaces are zero (neutral artifact)</p>"
        return secs
    layer, head, dim, _ = best[0]
    tops = S.top_surfaces(surfaces, top, layer=layer)
    views = [S.surface_view(surfaces, lay, h, d) for lay, h, d, _ in tops]
    secs.append(Section(f"{name}: top {len(views)} surfaces of layer {layer}",
                        [F.surfaces_grid_figure(views, [pts(v.layer, v.head, v.dim) for v in views],
                                                title=f"top surfaces of layer {layer} by ‖C‖")]))
    v = views[0]
    p = pts(v.layer, v.head, v.dim)
    secs.append(Section(f"{name}: strongest surface {v.name}",
                        [F.terrain_figure(v, p), F.heatmap_figure(v, p), F.controlnet_figure(v)]))
    if rows:
        traj_layers = [lay for lay in layers if pts(lay, head, dim) is not None]
        if len(traj_layers) >= 2:
            # the strongest layer and up to two neighbours on each side (the paper shows three layers)
            i = traj_layers.index(layer) if layer in traj_layers else 0
            chosen = traj_layers[max(0, i - 2): i + 3]
            tv = [S.surface_view(surfaces, lay, head, dim) for lay in chosen]
            tp = [pts(lay, head, dim) for lay in chosen]
            secs.append(Section(f"{name}: token trajectories (head {head}, dim {dim})",
                                [F.trajectory_figure(tv, tp)]))
        prompt = (qk.meta or {}).get("prompt")
        if prompt:
            secs[1].html = f"<p class='note'>prompt: <code>{escape(str(prompt))}</code></p>"
    return secs


def sections_for(paths: list[Path], follow_links: bool = True) -> list[Section]:
    """Sections for ``paths``; ``follow_links`` lets a q/k file pull in the artifact its meta names."""

    secs: list[Section] = []
    tidy = []
    qk_files: list[TidyResult] = []
    artifacts: list[Path] = []
    for p in paths:
        if is_artifact(p):
            artifacts.append(p)
            continue
        r = load_tidy(p)
        (qk_files if r.meta.get("kind") == "qk-points" and follow_links else tidy).append(r)
    for qk in qk_files:
        src = qk.meta.get("surfaces")
        if src and Path(src).resolve() not in [a.resolve() for a in artifacts] and is_artifact(Path(src)):
            artifacts.append(Path(src))
    for a in artifacts:
        match = next((q for q in qk_files if q.meta.get("surfaces")
                      and Path(q.meta["surfaces"]).resolve() == a.resolve()), None)
        secs.extend(surface_sections(load_surfaces(a), match, a.name))
    for r in tidy:
        meta = escape(json.dumps(r.meta, indent=1, default=str)) if r.meta else ""
        html = (f"<details><summary>meta</summary><pre>{meta}</pre></details>" if meta else "")
        html += f"<details><summary>table ({len(r.rows)} rows)</summary>{table_html(r)}</details>"
        secs.append(Section(r.meta.get("title") or r.name, auto_figures(r), html, str(r.path)))
    return secs


_CSS = """body{font-family:system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:1em 2em;color:#222}
h1{font-size:1.6em}h2{font-size:1.2em;border-bottom:1px solid #ddd;padding-top:1em}
.note{color:#666;font-size:.9em}table.tidy{border-collapse:collapse;font-size:.8em}
table.tidy td,table.tidy th{border:1px solid #ddd;padding:2px 6px}pre{font-size:.8em;background:#f6f6f6}
nav li{font-size:.9em}"""


def render_html(sections: list[Section], title: str, inline_js: bool = True,
                js_src: str = "/static/plotly.js") -> str:
    """The report page. ``inline_js`` embeds plotly.js (offline file); otherwise a ``<script src>``."""
    from plotly.offline import get_plotlyjs

    js = f"<script type='text/javascript'>{get_plotlyjs()}</script>" if inline_js else \
        f"<script src='{escape(js_src)}'></script>"
    toc, body = [], []
    cfg = {"displaylogo": False, "responsive": True}
    for i, s in enumerate(sections):
        toc.append(f"<li><a href='#s{i}'>{escape(s.title)}</a></li>")
        figs = "".join(pio.to_html(f, full_html=False, include_plotlyjs=False, config=cfg,
                                   div_id=f"s{i}f{j}") for j, f in enumerate(s.figures))
        src = f"<p class='note'>source: <code>{escape(s.source)}</code></p>" if s.source else ""
        empty = "" if s.figures or s.html else "<p class='note'>no plottable columns</p>"
        body.append(f"<section id='s{i}'><h2>{escape(s.title)}</h2>{src}{figs}{s.html}{empty}</section>")
    stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{escape(title)}</title>"
            f"<style>{_CSS}</style>{js}</head><body><h1>{escape(title)}</h1>"
            f"<p class='note'>generated by geosteer {stamp}; {len(sections)} sections</p>"
            f"<nav><ul>{''.join(toc)}</ul></nav>{''.join(body)}</body></html>")


def png_name(section: int, figure: int, title: str) -> str:
    """``s02_f1-ppl-vs-s_par.png``: the order (section, figure) and the figure's title as a short slug."""
    import re

    slug = re.sub(r"[^a-z0-9_.]+", "-", title.lower().split(": ", 1)[-1]).strip("-.")[:60].rstrip("-.")
    return f"s{section:02d}_f{figure}" + (f"-{slug}" if slug else "") + ".png"


def export_png(sections: list[Section], folder: Path) -> tuple[list[Path], str | None]:
    """Write every figure as PNG with kaleido (needs a local Chrome/Chromium). Returns (files, problem)."""
    try:
        import kaleido  # noqa: F401
    except ImportError:
        return [], "PNG export needs the optional package kaleido (pip install 'geosteer[png]')"
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    try:
        for i, s in enumerate(sections):
            for j, f in enumerate(s.figures):
                p = folder / png_name(i, j, f.layout.title.text or s.title)
                f.write_image(str(p), width=1000, height=int(f.layout.height or 500))
                files.append(p)
    except Exception as e:  # kaleido without a browser raises its own types
        return files, f"PNG export failed ({type(e).__name__}: {str(e).splitlines()[0][:200]})"
    return files, None


def build_report(paths: list[str | Path], out: str | Path, title: str = "geosteer report",
                 png_dir: str | Path | None = None) -> dict:
    """Write one self-contained HTML report for ``paths``; returns a summary dict."""
    if not paths:
        raise GeosteerError("no result files given")
    out = Path(out)
    if out.suffix.lower() not in (".html", ".htm"):
        raise GeosteerError(f"--out must end in .html (got {out.name})")
    sections = sections_for(expand_inputs(paths))
    html = render_html(sections, title)
    atomic_write_text(out, html)
    summary = {"out": str(out), "sections": len(sections), "figures": sum(len(s.figures) for s in sections),
               "bytes": len(html.encode())}
    if png_dir is not None:
        files, problem = export_png(sections, Path(png_dir))
        summary["png"] = len(files)
        if problem:
            summary["png_problem"] = problem
    return summary
