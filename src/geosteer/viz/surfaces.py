"""Views of a ``SurfaceBank`` for the figures, and post-RoPE q/k token points (recorded once, saved tidy).

``surface_view`` samples S_d(q, k) = b(q)ᵀ C_d b(k) (paper Eq. 1) on a grid over the layer's fitted range;
``token_points`` evaluates S_d at each token's self-pair (q_{i,d}, k_{i,d}) through ``bank.surface``.
``record_qk`` runs one forward with ``geosteer.record.AttentionRecorder`` and returns tidy rows
``{token_index, token, layer, head, dim, q, k}``; ``points_from_rows`` turns a saved file back into
``TokenPoints`` so reports never rerun the model. Query head h reads KV head h // n_rep (HF ``repeat_kv``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from geosteer.eval.generation import prompt_ids
from geosteer.interventions import steer
from geosteer.kernels.bspline import bspline_basis
from geosteer.manifold.edit import surface_norms as norms
from geosteer.manifold.explore import top_surfaces as ranked
from geosteer.models.loading import input_device
from geosteer.record import AttentionRecorder
from geosteer.viz.figures import SurfaceView, TokenPoints, controlnet_figure, heatmap_figure, terrain_figure

if TYPE_CHECKING:
    import plotly.graph_objects as go


def bank_layers(bank) -> list[int]:
    """The model layers the bank covers, in coefficient order."""
    layers = getattr(bank, "layers", None)
    if layers is None:
        return list(range(bank.coefficients.shape[0]))
    return [int(x) for x in layers]


def layer_slot(bank, layer: int) -> int:
    """Index into ``bank.coefficients`` of model layer ``layer`` (error naming the covered layers)."""
    layers = bank_layers(bank)
    if layer not in layers:
        raise ValueError(f"layer {layer} has no surfaces; the surfaces cover layers {_ranges(layers)}")
    return layers.index(layer)


def _ranges(xs: Sequence[int]) -> str:
    if not xs:
        return "none"
    xs = sorted(xs)
    if xs == list(range(xs[0], xs[-1] + 1)):
        return f"{xs[0]}–{xs[-1]}"
    return ", ".join(map(str, xs))


def layer_range(bank, layer: int) -> tuple[float, float]:
    """The fitted (lo, hi) range of ``layer`` (same on the query and key axis)."""
    slot = layer_slot(bank, layer)
    lo, hi = bank.lo, bank.hi
    lo = float(lo[slot]) if hasattr(lo, "__len__") or torch.is_tensor(lo) else float(lo)
    hi = float(hi[slot]) if hasattr(hi, "__len__") or torch.is_tensor(hi) else float(hi)
    return lo, hi


def check_surface(bank, layer: int, head: int, dim: int) -> None:
    c = bank.coefficients
    slot = layer_slot(bank, layer)
    if not 0 <= head < c.shape[1]:
        raise ValueError(f"head {head} out of range (valid 0–{c.shape[1] - 1})")
    if not 0 <= dim < c.shape[2]:
        raise ValueError(f"dim {dim} out of range (valid 0–{c.shape[2] - 1})")
    del slot


def coeffs(bank, layer: int, head: int, dim: int) -> np.ndarray:
    check_surface(bank, layer, head, dim)
    return bank.coefficients[layer_slot(bank, layer), head, dim].detach().float().cpu().numpy()


def surface_norms(bank) -> np.ndarray:
    """‖C_d‖_F for every surface: (bank layers, heads, dims) (:func:`geosteer.manifold.edit.surface_norms`)."""

    return norms(bank).cpu().numpy()


@torch.no_grad()
def surface_view(bank, layer: int, head: int, dim: int, n: int = 48, pad: float = 0.0) -> SurfaceView:
    """Sample S_d on an n×n grid over [lo − pad, hi + pad]² (rows = query values)."""

    c = coeffs(bank, layer, head, dim)
    lo, hi = layer_range(bank, layer)
    grid = np.linspace(lo - pad, hi + pad, n)
    g = torch.tensor(grid, dtype=torch.float32)
    k_count = c.shape[0]
    b = bspline_basis(g, k_count - 3, lo, hi).float().numpy()  # (n, K)
    z = b @ c @ b.T
    return SurfaceView(layer, head, dim, grid, grid.copy(), z, lo, hi, c, float(np.linalg.norm(c)))


@torch.no_grad()
def surface_at(bank, layer: int, head: int, dim: int, q: Iterable[float], k: Iterable[float]) -> np.ndarray:
    q_t = torch.as_tensor(np.asarray(list(q), dtype=np.float32))
    k_t = torch.as_tensor(np.asarray(list(k), dtype=np.float32))
    return bank.surface(layer, head, dim, q_t, k_t).detach().float().cpu().numpy()


def token_points(bank, layer: int, head: int, dim: int, labels: Sequence[str], q: Sequence[float],
                 k: Sequence[float]) -> TokenPoints:
    s = surface_at(bank, layer, head, dim, q, k) if len(labels) else np.zeros(0)
    return TokenPoints(list(labels), np.asarray(q, dtype=float), np.asarray(k, dtype=float), s)


def top_surfaces(bank, n: int = 8, layer: int | None = None) -> list[tuple[int, int, int, float]]:
    """(layer, head, dim, norm) of the ``n`` largest-norm surfaces (in one layer, or over the bank);
    the ranking is :func:`geosteer.manifold.explore.top_surfaces`."""

    if layer is not None:
        layer_slot(bank, layer)  # clear error for a layer without surfaces
    rows = ranked(bank, n, layers=None if layer is None else [layer])
    return [(r["layer"], r["head"], r["dim"], r["norm"]) for r in rows]


def token_labels(tok, ids: Sequence[int]) -> list[str]:
    return [tok.decode([int(i)]) for i in ids]


@torch.no_grad()
def record_qk_tensors(model, tok, prompt: str, layers: Sequence[int]) -> tuple[list[str], dict, dict]:
    """One forward under whatever is attached: labels, {layer: q (H, T, d)}, {layer: k (Hkv, T, d)}."""

    ids = prompt_ids(tok, prompt).to(input_device(model))
    rec = AttentionRecorder(layers=list(layers), what=("query", "key"))
    with steer(model, rec):
        model(input_ids=ids, use_cache=False)
    qs = {layer: rec[("query", layer)][0][0].float() for layer in layers}
    ks = {layer: rec[("key", layer)][0][0].float() for layer in layers}
    return token_labels(tok, ids[0].tolist()), qs, ks


def qk_rows(labels: Sequence[str], qs: dict, ks: dict, picks: Iterable[tuple[int, int, int]]) -> list[dict]:
    """Tidy rows for the picked (layer, head, dim) surfaces; query head h reads KV head h // n_rep."""
    rows = []
    for layer, head, dim in picks:
        q, k = qs[layer], ks[layer]
        n_rep = q.shape[0] // k.shape[0]
        for t, lab in enumerate(labels):
            rows.append({"token_index": t, "token": lab, "layer": layer, "head": head, "dim": dim,
                         "q": float(q[head, t, dim]), "k": float(k[head // n_rep, t, dim])})
    return rows


def default_picks(bank, top_per_layer: int = 8) -> list[tuple[int, int, int]]:
    """The top surfaces of every layer, plus the strongest (head, dim) on every layer (for trajectories)."""
    picks: list[tuple[int, int, int]] = []
    for layer in bank_layers(bank):
        picks.extend((lay, h, d) for lay, h, d, _ in top_surfaces(bank, top_per_layer, layer=layer))
    best = top_surfaces(bank, 1)
    if best:
        _, h, d, _ = best[0]
        picks.extend((layer, h, d) for layer in bank_layers(bank) if (layer, h, d) not in picks)
    return picks


def points_from_rows(rows: Sequence[dict], layer: int, head: int, dim: int) -> tuple[list[str], list, list]:
    sel = sorted((r for r in rows if (r.get("layer"), r.get("head"), r.get("dim")) == (layer, head, dim)),
                 key=lambda r: r["token_index"])
    return [str(r["token"]) for r in sel], [float(r["q"]) for r in sel], [float(r["k"]) for r in sel]


FIGURE_KINDS = ("heatmap", "terrain", "controlnet")


def surface_figure(bank, layer: int, head: int, dim: int, kind: str = "heatmap", n: int = 48) -> go.Figure:
    """The figure of one surface of ``bank`` (model ``layer``, ``head``, ``dim``), sampled on an n×n grid over its
    fitted range: ``heatmap`` (Figure 2), ``terrain`` (3-D, Figure 1) or ``controlnet`` (C_d itself)."""
    if kind not in FIGURE_KINDS:
        raise ValueError(f"unknown figure kind '{kind}'; valid: {', '.join(FIGURE_KINDS)}")
    if n < 2:
        raise ValueError(f"n must be >= 2 grid points (got {n})")
    view = surface_view(bank, layer, head, dim, n=n)
    return {"heatmap": heatmap_figure, "terrain": terrain_figure, "controlnet": controlnet_figure}[kind](view)
