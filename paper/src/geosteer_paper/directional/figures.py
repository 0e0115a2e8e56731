"""Plotly figures of the directional studies, drawn from their tidy result rows (no model needed).

- :func:`diagonal_maps_figure`: paper Fig. 4, baseline vs residual-space vs value-space diagonal view of
  one head (rows of ``diagonal_study``'s map file).
- :func:`head_localisation_figure`: paper Fig. 7, joint all-head Δloss per layer with the min–max band of
  single-head Δloss (rows of ``head_localisation``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from geosteer.errors import GeosteerError

_VIEW_TITLES = {"baseline": "baseline A", "residual": "residual-space view",
                "value_exclude_self": "value-space view (exclude-self)", "value_full": "value-space view (full)"}


def diagonal_maps_figure(rows: Sequence[dict], views: Sequence[str] | None = None,
                         clip: float = 1.0) -> go.Figure:
    """Heatmaps (key on x, query on y, upper triangle blank) of each view; one shared diverging scale,
    clipped to ±``clip`` (weights live in [0, 1]; the residual view can reach far beyond where
    (W_O v_t)ᵀz_t is small; hover shows the true value), so negative diagonal entries show in blue."""
    if not rows:
        raise GeosteerError("no map rows to draw")
    present = list(dict.fromkeys(r["view"] for r in rows))
    views = [v for v in (views or ["baseline", "residual", "value_exclude_self"]) if v in present]
    q = 1 + max(int(r["query"]) for r in rows)
    mats = {v: np.full((q, q), np.nan) for v in views}
    for r in rows:
        if r["view"] in mats:
            mats[r["view"]][int(r["query"]), int(r["key"])] = float(r["weight"])
    zmax = clip
    fig = make_subplots(rows=1, cols=len(views), subplot_titles=[_VIEW_TITLES.get(v, v) for v in views],
                        horizontal_spacing=0.04)
    for i, v in enumerate(views):
        fig.add_trace(go.Heatmap(z=mats[v], colorscale="RdBu_r", zmin=-zmax, zmax=zmax, zmid=0,
                                 showscale=i == len(views) - 1, hovertemplate="q %{y}, k %{x}: %{z:.3f}"
                                 "<extra>" + v + "</extra>"), row=1, col=i + 1)
        fig.update_yaxes(autorange="reversed", row=1, col=i + 1)
    r0 = rows[0]
    fig.update_layout(title=f"attention-diagonal views (s∥ = 0), layer {r0.get('layer')}, head {r0.get('head')}; "
                            f"colour clipped to ±{clip:g}",
                      height=380, width=360 * len(views) + 80, margin=dict(l=40, r=20, t=70, b=40),
                      plot_bgcolor="white")
    return fig


def head_localisation_figure(rows: Sequence[dict]) -> go.Figure:
    """Joint (head = −1) Δloss per layer, and the band between the smallest and largest single-head Δloss."""
    layers = sorted({int(r["layer"]) for r in rows})
    if not layers:
        raise GeosteerError("no head-localisation rows to draw")
    joint, lo, hi = [], [], []
    for layer in layers:
        rs = [r for r in rows if int(r["layer"]) == layer]
        single = [float(r["delta_loss"]) for r in rs if int(r["head"]) >= 0]
        joint.append(next(float(r["delta_loss"]) for r in rs if int(r["head"]) < 0))
        lo.append(min(single))
        hi.append(max(single))
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=layers + layers[::-1], y=hi + lo[::-1], fill="toself", line=dict(width=0),
                             fillcolor="rgba(31,119,180,0.3)", name="single heads (min–max)", hoverinfo="skip"))
    fig.add_trace(go.Scatter(x=layers, y=hi, mode="lines", line=dict(color="rgb(31,119,180)", width=1),
                             showlegend=False))
    fig.add_trace(go.Scatter(x=layers, y=lo, mode="lines", line=dict(color="rgb(31,119,180)", width=1),
                             showlegend=False))
    fig.add_trace(go.Scatter(x=layers, y=joint, mode="lines+markers", line=dict(color="rgb(255,127,14)"),
                             name="all heads jointly"))
    site = rows[0].get("site", "")
    fig.update_layout(title=f"head localisation: Δloss of s∥ = {rows[0].get('s_par')} ({site}) per layer",
                      xaxis_title="layer", yaxis_title="Δ loss (edited − baseline, nats)", height=420,
                      width=760)
    return fig
