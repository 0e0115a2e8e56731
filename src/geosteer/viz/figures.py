"""Plotly figures of attention-manifold surfaces S_d(q, k) = b(q)ᵀ C_d b(k) (paper Eq. 1, Figures 1–3).

They take plain arrays (``SurfaceView``, ``TokenPoints``; built by ``geosteer.viz.surfaces``). Heatmaps put
the key on x and the query on y; red amplifies (S > 0), blue attenuates, S = −1 is a wall.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

try:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
except ModuleNotFoundError as _e:  # without the optional extra: one line naming it
    from geosteer.extras import missing

    raise missing(_e) from None

COLORSCALE = "RdBu_r"


@dataclass
class SurfaceView:
    """S_d sampled on a grid: ``z[i, j] = S(qs[i], ks[j])`` over the fitted region [lo, hi]²."""

    layer: int
    head: int
    dim: int
    qs: np.ndarray
    ks: np.ndarray
    z: np.ndarray
    lo: float
    hi: float
    coeffs: np.ndarray  # (K, K), rows = query control points
    norm: float = 0.0

    @property
    def name(self) -> str:
        return f"L{self.layer} H{self.head} D{self.dim}"


@dataclass
class TokenPoints:
    """Each token's self-pair (q_{i,d}, k_{i,d}) and the surface height S_d there."""

    labels: list[str]
    q: np.ndarray
    k: np.ndarray
    s: np.ndarray = field(default_factory=lambda: np.zeros(0))


def _zmax(z: np.ndarray) -> float:
    m = float(np.nanmax(np.abs(z))) if z.size else 0.0
    return m if m > 0 else 1.0


def _clean_label(t: str) -> str:
    return t.replace("Ġ", "·").replace("▁", "·").replace("\n", "⏎") or "∅"


def terrain_figure(view: SurfaceView, points: TokenPoints | None = None, title: str | None = None,
                   height: int = 520) -> go.Figure:
    """3D terrain of S_d(q, k) with the prompt's tokens as labelled dots (paper Figure 1)."""
    zm = _zmax(view.z)
    fig = go.Figure(go.Surface(x=view.ks, y=view.qs, z=view.z, colorscale=COLORSCALE, cmin=-zm, cmax=zm,
                               colorbar=dict(title="S", len=0.7), name=view.name,
                               hovertemplate="k=%{x:.3f}<br>q=%{y:.3f}<br>S=%{z:.4f}<extra></extra>"))
    if points is not None and len(points.labels):
        fig.add_trace(go.Scatter3d(x=points.k, y=points.q, z=points.s, mode="markers+text",
                                   text=[_clean_label(t) for t in points.labels], textposition="top center",
                                   marker=dict(size=4, color="black"), name="tokens",
                                   hovertemplate="%{text}<br>k=%{x:.3f} q=%{y:.3f} S=%{z:.4f}"
                                                 "<extra></extra>"))
    fig.update_layout(title=title or f"S(q, k) terrain, {view.name}, ‖C‖={view.norm:.3g}", height=height,
                      scene=dict(xaxis_title="k (post-RoPE)", yaxis_title="q (post-RoPE)", zaxis_title="S"),
                      margin=dict(l=0, r=0, t=40, b=0), showlegend=False)
    return fig


def _heatmap_traces(view: SurfaceView, points: TokenPoints | None, zm: float, showscale: bool = True):
    traces = [go.Heatmap(x=view.ks, y=view.qs, z=view.z, colorscale=COLORSCALE, zmin=-zm, zmax=zm,
                         showscale=showscale, colorbar=dict(title="S", len=0.8),
                         hovertemplate="k=%{x:.3f}<br>q=%{y:.3f}<br>S=%{z:.4f}<extra></extra>")]
    if points is not None and len(points.labels):
        traces.append(go.Scatter(x=points.k, y=points.q, mode="markers+text",
                                 text=[_clean_label(t) for t in points.labels], textposition="top center",
                                 textfont=dict(size=9), marker=dict(size=6, color="black"), showlegend=False,
                                 customdata=points.s,
                                 hovertemplate="%{text}<br>k=%{x:.3f} q=%{y:.3f} S=%{customdata:.4f}"
                                               "<extra></extra>"))
    return traces


def heatmap_figure(view: SurfaceView, points: TokenPoints | None = None, title: str | None = None,
                   height: int = 460) -> go.Figure:
    """Heatmap of S_d(q, k) (x = key, y = query) with token self-pairs as labelled dots (Figure 2)."""
    fig = go.Figure(_heatmap_traces(view, points, _zmax(view.z)))
    fig.update_layout(title=title or f"S(q, k), {view.name}, ‖C‖={view.norm:.3g}", height=height,
                      xaxis_title="k (post-RoPE)", yaxis_title="q (post-RoPE)", template="plotly_white",
                      margin=dict(l=50, r=10, t=40, b=40))
    return fig


def controlnet_figure(view: SurfaceView, title: str | None = None, height: int = 360) -> go.Figure:
    """The K×K control net C_d itself (rows = query control points, columns = key control points)."""
    c = np.asarray(view.coeffs)
    zm = _zmax(c)
    k = c.shape[0]
    fig = go.Figure(go.Heatmap(z=c, x=list(range(k)), y=list(range(k)), colorscale=COLORSCALE, zmin=-zm,
                               zmax=zm, texttemplate="%{z:.2f}", textfont=dict(size=8),
                               hovertemplate="row %{y} (query), col %{x} (key): %{z:.4f}<extra></extra>"))
    fig.update_layout(title=title or f"control net C, {view.name}", height=height, template="plotly_white",
                      xaxis=dict(title="column (key)", dtick=1), yaxis=dict(title="row (query)", dtick=1),
                      margin=dict(l=50, r=10, t=40, b=40))
    return fig


def surfaces_grid_figure(views: Sequence[SurfaceView], points: Sequence[TokenPoints | None] | None = None,
                         cols: int = 4, title: str | None = None) -> go.Figure:
    """A grid of heatmaps (e.g. the top-N surfaces of one layer by norm), shared colour scale."""
    if not views:
        raise ValueError("surfaces_grid_figure needs at least one surface")
    cols = max(1, min(cols, len(views)))
    rows = math.ceil(len(views) / cols)
    zm = max(_zmax(v.z) for v in views)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[f"{v.name} ‖C‖={v.norm:.3g}" for v in views],
                        horizontal_spacing=0.04, vertical_spacing=0.08)
    for i, v in enumerate(views):
        p = points[i] if points is not None else None
        for tr in _heatmap_traces(v, p, zm, showscale=(i == 0)):
            fig.add_trace(tr, row=i // cols + 1, col=i % cols + 1)
    fig.update_layout(title=title or "top surfaces", height=280 * rows + 80, template="plotly_white",
                      margin=dict(l=40, r=10, t=60, b=30))
    return fig


def trajectory_figure(views: Sequence[SurfaceView], points: Sequence[TokenPoints],
                      title: str | None = None, height: int = 620) -> go.Figure:
    """Token trajectories across consecutive layers for one (head, dim) (paper Figure 3).

    Each layer's surface is drawn as a coloured plane at height = layer index (colour = S), each token's
    self-pair as a dot on its layer's plane, and a line joins one token's dots across the layers.
    """
    if len(views) != len(points) or not views:
        raise ValueError("trajectory_figure needs one TokenPoints per layer view (and at least one layer)")
    zm = max(_zmax(v.z) for v in views)
    fig = go.Figure()
    for i, v in enumerate(views):
        fig.add_trace(go.Surface(x=v.ks, y=v.qs, z=np.full_like(v.z, v.layer, dtype=float), surfacecolor=v.z,
                                 colorscale=COLORSCALE, cmin=-zm, cmax=zm, opacity=0.75, showscale=(i == 0),
                                 colorbar=dict(title="S", len=0.6), name=f"layer {v.layer}",
                                 hovertemplate=f"layer {v.layer}<br>k=%{{x:.3f}} q=%{{y:.3f}}"
                                               "<extra></extra>"))
    n_tok = len(points[0].labels)
    for t in range(n_tok):
        lab = _clean_label(points[0].labels[t])
        fig.add_trace(go.Scatter3d(
            x=[p.k[t] for p in points], y=[p.q[t] for p in points], z=[v.layer for v in views],
            mode="lines+markers+text", text=[lab] + [""] * (len(views) - 1), name=lab,
            marker=dict(size=3), line=dict(width=3),
            hovertemplate=lab + "<br>layer %{z}<br>k=%{x:.3f} q=%{y:.3f}<extra></extra>"))
    v0 = views[0]
    fig.update_layout(title=title or f"token trajectories, head {v0.head}, dim {v0.dim}, layers "
                                     f"{views[0].layer}–{views[-1].layer}", height=height,
                      scene=dict(xaxis_title="k", yaxis_title="q", zaxis_title="layer"),
                      margin=dict(l=0, r=0, t=40, b=0))
    return fig


def norms_figure(norms: np.ndarray, title: str = "surface norms ‖C‖ per layer",
                 layers: list[int] | None = None) -> go.Figure:
    """Per-layer distribution of surface norms (bank layers, heads, dims): max, 99th pct, median.

    ``layers``: the model layer of each bank row (the x axis); default 0..n-1 (bank order)."""
    n = np.asarray(norms).reshape(norms.shape[0], -1)
    layers = list(range(n.shape[0])) if layers is None else [int(x) for x in layers]
    if len(layers) != n.shape[0]:
        raise ValueError(f"norms_figure: {n.shape[0]} rows of surfaces but {len(layers)} layer numbers")
    fig = go.Figure()
    for name, vals in (("max", n.max(1)), ("p99", np.percentile(n, 99, axis=1)), ("median", np.median(n, 1))):
        fig.add_trace(go.Scatter(x=layers, y=vals, mode="lines+markers", name=name))
    fig.update_layout(title=title, xaxis_title="layer", yaxis_title="‖C‖_F", template="plotly_white",
                      height=360)
    return fig
