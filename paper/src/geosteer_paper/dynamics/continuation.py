"""α continuation of critical candidates and basin maps of the flow of g_α on sphere slices (paper Figs. 11,
12, App. C.3–C.4).

**α continuation.** g_α(u) = P_u(V u + α Φ(u)). At α = 0 the field is P_u V u, whose zeros are exactly the
±(real eigenvectors of V) (:func:`geosteer_paper.dynamics.critical.ov_exact`), so tracks start there: the
``n_tracks`` real eigenvectors of largest eigenvalue (``start="top"``) or given unit vectors. α then goes
0 → 1 in ``steps`` equal steps; at each step the point of the previous step is refined by the Riemannian
Newton of :func:`geosteer_paper.dynamics.critical.refine` on g_α (warm start), and labelled by its tangent spectrum:
maximal real part, saddle index (number of positive real parts), max |imag part|, zero score. A track whose
Newton does not converge (score > ``conv_tol``) is marked ``converged = False`` from then on (it is still
continued from its last point, so the rows say where it was lost — a fold or a bifurcation).

**Basin maps.** A 2-D slice of the sphere: u(a, b) = unit(m + a e₁ + b e₂), m the unit mean of unit real
residual directions and e₁, e₂ their top two principal directions made orthogonal to m (:func:`pca_plane`),
a, b on a ``grid`` × ``grid`` lattice in [−span, span]. From every grid point the flow du/dt = g_α(u) is
integrated with explicit Euler or RK4, renormalising after every step, for a fixed number of steps; time is
measured in units of 1/median ‖F(u)‖ over the grid (so ``dt`` is dimensionless). End points are clustered by
angle (greedy, ``cluster_deg``) and each grid point is coloured by its end cluster.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from geosteer.errors import GeosteerError
from geosteer.extras import require
from geosteer_paper.dynamics.critical import label_point, refine, token_states
from geosteer_paper.dynamics.fields import ReducedField

METHODS = ("euler", "rk4")


def check_steps(steps: int, name: str = "steps") -> int:
    if steps <= 0:
        raise GeosteerError(f"{name} must be >= 1 (got {steps})")
    return int(steps)


def check_grid(grid: int) -> int:
    if grid <= 1:
        raise GeosteerError(f"grid must be >= 2 (got {grid})")
    return int(grid)


def check_method(method: str) -> str:
    if method not in METHODS:
        raise GeosteerError(f"unknown integrator '{method}'; valid: {', '.join(METHODS)}")
    return method


def ov_start_points(V: torch.Tensor, n: int, imag_tol: float = 1e-9) -> torch.Tensor:
    """Unit real eigenvectors (n, d) of the ``n`` largest real eigenvalues of V: zeros of g₀ = P_u V u."""
    ev, vec = torch.linalg.eig(V)
    scale = ev.abs().max()
    real = ((ev.imag.abs() <= imag_tol * scale) & (ev.abs() > 1e-9 * scale)).nonzero().flatten()
    if real.numel() == 0:
        raise GeosteerError("V has no real nonzero eigenvalue: no zero of the attention-only field to start from")
    order = real[torch.argsort(ev.real[real], descending=True)][:n]
    u = vec[:, order].real.T.double()
    return u / u.norm(dim=-1, keepdim=True)


def continue_alpha(V: torch.Tensor, phi: torch.nn.Module, starts: torch.Tensor, steps: int = 10, *,
                   refine_iters: int = 6, refine_tol: float = 1e-10, conv_tol: float = 1e-6,
                   alphas: Sequence[float] | None = None) -> list[dict]:
    """Track each row of ``starts`` (zeros of g₀) along α = 0, 1/steps, …, 1 (or the given ``alphas``, in
    order); one row per (track, α)."""
    check_steps(steps, "alpha steps")
    grid = [k / steps for k in range(steps + 1)] if alphas is None else [float(a) for a in alphas]
    rows: list[dict] = []
    for t, u0 in enumerate(starts.double()):
        u, ok = u0 / u0.norm(), True
        for k, alpha in enumerate(grid):
            field = ReducedField("full", V=V, phi=phi, alpha=alpha)
            prev = u
            u, jac = refine(field, u, refine_iters, refine_tol)
            lab, _ = label_point(field, u)
            ok = ok and lab["score"] <= conv_tol
            cos = max(-1.0, min(1.0, float(prev @ u)))
            rows.append({"track": t, "step": k, "alpha": alpha, "score": lab["score"], "label": lab["label"],
                         "max_real": lab["max_real"], "saddle_index": lab["n_pos"],
                         "max_abs_imag": lab["max_abs_imag"], "rho": lab["rho"], "converged": ok,
                         "moved_deg": math.degrees(math.acos(cos)), "jacobians": jac, "u": u.tolist()})
    return rows


def pca_plane(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(m, e₁, e₂) from real residuals x (n, d): m the unit mean of the unit rows, e₁, e₂ orthonormal top-2
    principal directions of the unit rows with m projected out."""
    if x.shape[0] < 3:
        raise GeosteerError(f"a PCA plane needs at least 3 residual directions (got {x.shape[0]})")
    u = x.double() / x.double().norm(dim=-1, keepdim=True)
    m = u.mean(0)
    m = m / m.norm()
    c = u - u.mean(0)
    c = c - (c @ m)[:, None] * m  # principal directions inside m⊥
    _, _, vh = torch.linalg.svd(c, full_matrices=False)
    e1, e2 = vh[0], vh[1]
    e1 = e1 - (e1 @ m) * m
    e1 = e1 / e1.norm()
    e2 = e2 - (e2 @ m) * m - (e2 @ e1) * e1
    return m, e1, e2 / e2.norm()


def grid_points(m: torch.Tensor, e1: torch.Tensor, e2: torch.Tensor, grid: int,
                span: float = 1.0) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    """Unit directions unit(m + a e₁ + b e₂) (grid², d) for a, b on ``linspace(-span, span, grid)`` (a varies
    fastest), with the a and b of each point."""
    check_grid(grid)
    if not (math.isfinite(span) and span > 0):
        raise GeosteerError(f"span must be finite and > 0 (got {span})")
    ax = np.linspace(-span, span, grid)
    b, a = np.meshgrid(ax, ax, indexing="ij")
    a, b = a.ravel(), b.ravel()
    x = m[None] + torch.from_numpy(a)[:, None] * e1[None] + torch.from_numpy(b)[:, None] * e2[None]
    return x / x.norm(dim=-1, keepdim=True), a, b


@torch.no_grad()
def integrate_flow(field: ReducedField, u: torch.Tensor, steps: int = 200, dt: float = 0.1,
                   method: str = "rk4") -> torch.Tensor:
    """End points of du/dt = g(u) from every row of u (n, d) after ``steps`` steps of size dt/median‖F(u₀)‖,
    renormalised after each step (Euler or RK4)."""
    check_steps(steps, "flow steps")
    check_method(method)
    if not (math.isfinite(dt) and dt > 0):
        raise GeosteerError(f"dt must be finite and > 0 (got {dt})")
    u, h = flow_start(field, u, dt)
    for _ in range(steps):
        u = sphere_step(field, u, h, method)
    return u


def flow_start(field: ReducedField, u: torch.Tensor, dt: float) -> tuple[torch.Tensor, float]:
    """The rows of u (n, d) on the unit sphere in float64 and the step h = dt/median‖F(u)‖ (the flows' time unit)."""
    u = u.double() / u.double().norm(dim=-1, keepdim=True)
    return u, dt / float(field.ambient(u).norm(dim=-1).median().clamp_min(1e-300))


def sphere_step(field: ReducedField, u: torch.Tensor, h: float, method: str = "rk4") -> torch.Tensor:
    """One step of size h of du/dt = g(u) (``"euler"`` or ``"rk4"``), renormalised onto the sphere."""
    if method == "euler":
        x = u + h * field(u)
    else:
        k1 = field(u)
        k2 = field(u + 0.5 * h * k1)
        k3 = field(u + 0.5 * h * k2)
        k4 = field(u + h * k3)
        x = u + h / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
    return x / x.norm(dim=-1, keepdim=True)


def cluster_ends(ends: torch.Tensor, cluster_deg: float = 5.0) -> tuple[np.ndarray, torch.Tensor]:
    """Greedy angular clustering of unit end points (n, d): a point joins the first centre within
    ``cluster_deg`` degrees, else opens a new one. Clusters are renumbered by size (0 = largest); returns
    (labels, centres (k, d))."""
    cos_tol = math.cos(math.radians(cluster_deg))
    centres: list[torch.Tensor] = []
    labels = np.empty(ends.shape[0], dtype=int)
    for i, e in enumerate(ends):
        for c, z in enumerate(centres):
            if float(e @ z) >= cos_tol:
                labels[i] = c
                break
        else:
            labels[i] = len(centres)
            centres.append(e)
    sizes = np.bincount(labels, minlength=len(centres))
    order = np.argsort(-sizes, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return rank[labels], torch.stack([centres[o] for o in order])


def basin_map(fields: dict[float, ReducedField], plane: Sequence[torch.Tensor], grid: int = 15, span: float = 1.0,
              *, steps: int = 200, dt: float = 0.1, method: str = "rk4",
              cluster_deg: float = 5.0) -> tuple[list[dict], list[dict]]:
    """Basin map of each field (keyed by α) on the slice ``plane`` = (m, e₁, e₂).

    Returns (point rows: alpha, i, j, a, b, cluster, end_score; cluster rows: alpha, cluster, size, the end
    centre's zero score and its coordinates ⟨c, m⟩, ⟨c, e₁⟩, ⟨c, e₂⟩ in the slice)."""
    m, e1, e2 = plane
    u0, a, b = grid_points(m, e1, e2, grid, span)
    pts, clus = [], []
    for alpha, field in fields.items():
        ends = integrate_flow(field, u0, steps, dt, method)
        labels, centres = cluster_ends(ends, cluster_deg)
        with torch.no_grad():
            sc = field.score(ends)
            csc = field.score(centres)
        for n in range(u0.shape[0]):
            pts.append({"alpha": alpha, "i": n % grid, "j": n // grid, "a": float(a[n]), "b": float(b[n]),
                        "cluster": int(labels[n]), "end_score": float(sc[n])})
        for c in range(centres.shape[0]):
            z = centres[c]
            clus.append({"alpha": alpha, "cluster": c, "size": int((labels == c).sum()), "end_score": float(csc[c]),
                         "cos_m": float(z @ m), "cos_e1": float(z @ e1), "cos_e2": float(z @ e2)})
    return pts, clus


def basin_figure(points: list[dict]):
    """A plotly figure from basin point rows (or all rows of a ``basins`` tidy file; only ``table = points``
    are drawn): one heatmap of end-cluster labels per α, side by side."""

    go = require("plotly.graph_objects")
    subplots = require("plotly.subplots")
    points = [r for r in points if r.get("table", "points") == "points"]
    alphas = sorted({r["alpha"] for r in points})
    fig = subplots.make_subplots(rows=1, cols=len(alphas), subplot_titles=[f"α = {a:g}" for a in alphas])
    for k, alpha in enumerate(alphas):
        sel = [r for r in points if r["alpha"] == alpha]
        a = sorted({r["a"] for r in sel})
        b = sorted({r["b"] for r in sel})
        z = np.full((len(b), len(a)), np.nan)
        for r in sel:
            z[b.index(r["b"]), a.index(r["a"])] = r["cluster"]
        fig.add_trace(go.Heatmap(x=a, y=b, z=z, colorscale="Viridis", showscale=k == 0,
                                 colorbar={"title": "end cluster"}), row=1, col=k + 1)
        fig.update_xaxes(title_text="a (PC1)", row=1, col=k + 1)
        fig.update_yaxes(title_text="b (PC2)", row=1, col=k + 1)
    fig.update_layout(title="basins of the flow of g_α on a PCA slice of the sphere")
    return fig


def continuation_figure(rows: list[dict]):
    """A plotly figure from ``continuation`` rows: max real part, saddle index and max |imag part| of the
    tangent spectrum against α, one line per track (dashed markers where Newton had lost the track)."""

    go = require("plotly.graph_objects")
    subplots = require("plotly.subplots")
    panels = (("max_real", "max Re λ"), ("saddle_index", "saddle index"), ("max_abs_imag", "max |Im λ|"))
    fig = subplots.make_subplots(rows=1, cols=3, subplot_titles=[t for _, t in panels])
    for t in sorted({r["track"] for r in rows}):
        sel = sorted((r for r in rows if r["track"] == t), key=lambda r: r["alpha"])
        for k, (key, _) in enumerate(panels):
            fig.add_trace(go.Scatter(x=[r["alpha"] for r in sel], y=[r[key] for r in sel], name=f"track {t}",
                                     legendgroup=str(t), showlegend=k == 0, mode="lines+markers",
                                     marker={"symbol": ["circle" if r["converged"] else "x" for r in sel]}),
                          row=1, col=k + 1)
            fig.update_xaxes(title_text="α", row=1, col=k + 1)
    fig.update_layout(title="tangent spectra of critical candidates under FFN gain α (x: track lost)")
    return fig


def fit_linear_field(z: np.ndarray, y: np.ndarray) -> dict:
    """Least-squares affine fit y ≈ (z − z̄) Jᵀ + c of a field sampled at points z (n, k) with values y (n, k):
    the local linearisation of an empirical field in a k-dim subspace (paper App. C.4 "local spectra").
    Returns J, c, R² of the fit and the spectrum summary of J (max real part, max |imag part|, n_pos)."""
    n, k = z.shape
    if n <= k + 1:
        raise GeosteerError(f"a linear fit in {k} dims needs more than {k + 1} points (got {n})")
    zc = z - z.mean(0)
    X = np.hstack([zc, np.ones((n, 1))])
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    J, c = coef[:k].T, coef[k]
    resid = y - X @ coef
    ss = ((y - y.mean(0)) ** 2).sum()
    ev = np.linalg.eigvals(J)
    return {"J": J, "c": c, "r2": float(1 - (resid ** 2).sum() / ss) if ss > 0 else float("nan"),
            "max_real": float(ev.real.max()), "max_abs_imag": float(np.abs(ev.imag).max()),
            "n_pos": int((ev.real > 0).sum())}


def inward_scores(z: np.ndarray, y: np.ndarray) -> dict:
    """How much a sampled field y (n, k) at points z (n, k) points towards the centroid z̄: the fraction of
    points with ⟨y_i, z̄ − z_i⟩ > 0 (0.5 = balanced) and the mean cosine between y_i and z̄ − z_i."""
    to_c = z.mean(0) - z
    num = (y * to_c).sum(1)
    den = np.linalg.norm(y, axis=1) * np.linalg.norm(to_c, axis=1)
    ok = den > 0
    return {"inward_fraction": float((num[ok] > 0).mean()), "inward_cos": float((num[ok] / den[ok]).mean())}


def phase_reconstruction(u: torch.Tensor, g: torch.Tensor, k: int = 2) -> dict:
    """Empirical field of unit directions u (n, d) with tangent updates g (n, d) in the top-k PCA subspace of
    u (inside m⊥, m the unit mean): coordinates z = u E, field y = g E; inward scores and the local linear
    spectrum of y(z) (:func:`fit_linear_field`)."""
    if not 1 <= k < u.shape[1]:
        raise GeosteerError(f"k must be in [1, d − 1] (got {k})")
    un = u.double() / u.double().norm(dim=-1, keepdim=True)
    m = un.mean(0)
    m = m / m.norm()
    c = un - un.mean(0)
    c = c - (c @ m)[:, None] * m
    E = torch.linalg.svd(c, full_matrices=False)[2][:k].T  # (d, k), orthonormal, ⟂ m up to rounding
    z, y = (un @ E).numpy(), (g.double() @ E).numpy()
    fit = fit_linear_field(z, y)
    return {"k": k, "n": int(u.shape[0]), **inward_scores(z, y), **{key: v for key, v in fit.items()
                                                                    if key not in ("J", "c")}, "J": fit["J"]}


@torch.no_grad()
def real_updates(model, ids: torch.Tensor, layer: int, n: int, seed: int = 0, with_bos: bool = False,
                 batch_size: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """(u, g) for n real tokens at ``layer`` (drawn by ``numpy.random.default_rng(seed)``; position 0 left out
    unless ``with_bos``): u = unit(x) of the block input x and g = P_u (x' − x)/‖x‖, the first-order velocity
    of the direction under the block's whole update x' − x = A + Φ (the empirical field Ĝ of App. C.4)."""
    x, y = token_states(model, ids, layer, ("resid_pre", "resid_post"), with_bos=with_bos,
                        batch_size=batch_size)
    if n > x.shape[0]:
        raise GeosteerError(f"asked for {n} tokens but the windows hold only {x.shape[0]}")
    pick = torch.from_numpy(np.random.default_rng(seed).choice(x.shape[0], size=n, replace=False))
    x, y = x[pick], y[pick]
    r = x.norm(dim=-1, keepdim=True)
    u, delta = x / r, (y - x) / r
    return u, delta - (delta * u).sum(-1, keepdim=True) * u
