"""Approximate critical directions of the reduced fields and their tangent-spectrum labels (paper §4
"FFN reshapes the local critical geometry", Table 2 / Table 6, App. C.3–C.4), plus root refinement.

Search. A zero of g(u) = P_u F(u) is a direction where F(u) ∥ u, i.e. where the zero score
s(u) = ‖g(u)‖/‖F(u)‖ = |sin ∠(u, F(u))| vanishes. We minimise s(u)² = 1 − ⟨u, F⟩²/‖F‖² over the sphere from
every seed at once (u = x/‖x‖, Adam on x with a cosine-decaying step from ``lr`` to ``lr``/1000: s is
scale-free, so its gradient is tangential), for ``steps`` steps, in float32. Zeros are global minima of s²
whatever their dynamical type, so — unlike following the flow of g, which only ever reaches attractors —
the search is not biased towards A-like points (though basins of the descent differ in size, so it need
not find every zero). Seeds: unit block
inputs ``resid_pre`` of real held-out tokens at the layer (position 0 left out unless ``with_bos``) and
Gaussian random directions (``numpy.random.default_rng(seed)``). Candidates with s ≤ ``threshold`` are
kept and de-duplicated (⟨u₁, u₂⟩ > 1 − ``dedup_tol``: the same point; ±u are different points).

Label. Eigenvalues of the tangent Jacobian J (d − 1 dims, :func:`geosteer_paper.dynamics.fields.tangent_jacobian`):
A-like (all real parts < 0), R-like (all > 0), S-like (mixed).

Refinement (what the paper left out). Riemannian Newton on g = 0 in tangent coordinates (chart
u = unit(u₀ + B₀ v)): J δ = −B₀ᵀ g(u), chord steps with one factorised Jacobian per chart, the step halved
until s decreases; stop at s ≤ ``refine_tol`` or after ``refine_iters`` Jacobians (:func:`refine`).
Each refined point is labelled again;
``survives`` says whether the label is unchanged, ``angle_deg`` how far the root moved. Two candidates that
refine to the same root are one refined point (``duplicate_of`` names the first); the ``refined`` counts
are over distinct converged roots.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from geosteer.errors import GeosteerError
from geosteer.hooks import attach_hooks
from geosteer.models.limits import check_positions
from geosteer.models.loading import input_device
from geosteer_paper.dynamics.fields import LABELS, ReducedField, classify, layer_fields, tangent_basis, tangent_jacobian


def check_threshold(threshold: float) -> float:
    if not (math.isfinite(threshold) and 0 < threshold < 1):
        raise GeosteerError(f"threshold must be in (0, 1) (got {threshold})")
    return float(threshold)


def random_seeds(n: int, d: int, seed: int = 0) -> torch.Tensor:
    """n Gaussian unit directions in R^d from ``numpy.random.default_rng(seed)`` (float64)."""
    x = torch.from_numpy(np.random.default_rng(seed).standard_normal((n, d)))
    return x / x.norm(dim=-1, keepdim=True)


def minimise_score(field: ReducedField, seeds: torch.Tensor, steps: int = 1500, lr: float = 0.05,
                   dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Minimise s(u)² from every row of ``seeds`` (n, d) at once (in ``dtype``); returns the unit end points
    (n, d) in float64."""
    field = field.to(dtype)
    x = seeds.detach().to(dtype).clone().requires_grad_(True)
    opt = torch.optim.Adam([x], lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, steps), eta_min=lr * 1e-3)
    for _ in range(steps):
        u = x / x.norm(dim=-1, keepdim=True)
        f = field.ambient(u)
        s2 = 1.0 - (f * u).sum(-1) ** 2 / (f * f).sum(-1).clamp_min(1e-300)
        opt.zero_grad()
        s2.sum().backward()
        opt.step()
        sched.step()
    with torch.no_grad():
        x = x.double()
        return x / x.norm(dim=-1, keepdim=True)


def dedup(points: torch.Tensor, scores: torch.Tensor, tol: float = 1e-3) -> list[int]:
    """Indices of distinct points (best score first); ⟨u_i, u_j⟩ > 1 − tol counts as the same point."""
    order = torch.argsort(scores).tolist()
    kept: list[int] = []
    for i in order:
        if all(float(points[i] @ points[j]) <= 1 - tol for j in kept):
            kept.append(i)
    return kept


def refine(field: ReducedField, u: torch.Tensor, iters: int = 4, tol: float = 1e-10,
           J: torch.Tensor | None = None, chord_steps: int = 25) -> tuple[torch.Tensor, int]:
    """Riemannian Newton on g(u) = 0 from u (d,); returns (refined u, Jacobians used).

    Each outer iteration fixes a chart at the current point u₀ (u = unit(u₀ + B₀ v), B₀ a basis of u₀⊥) and
    factorises the tangent Jacobian J₀ there once (``J`` if given, for the first chart); up to ``chord_steps``
    chord-Newton steps v ← v − J₀⁻¹ B₀ᵀ g(u) follow, each halved until the zero score decreases. A new chart
    (fresh Jacobian) is taken when the chord stalls; at most ``iters`` charts. Stops at score ≤ ``tol``."""
    u = u.double().clone()
    s = float(field.score(u[None])[0])
    used = 0
    while s > tol and used < iters:
        B0 = tangent_basis(u)
        J0 = J if (used == 0 and J is not None) else tangent_jacobian(field, u, B0)
        used += 1
        lu = torch.linalg.lu_factor(J0)
        u0, v = u, torch.zeros(B0.shape[1], dtype=u.dtype)
        progressed = False
        for _ in range(chord_steps):
            r = B0.T @ field(u[None])[0]
            delta = -torch.linalg.lu_solve(*lu, r[:, None])[:, 0]
            if not torch.isfinite(delta).all():
                break
            step, moved = 1.0, False
            while step > 1e-4:
                x = u0 + B0 @ (v + step * delta)
                cand = x / x.norm()
                s_new = float(field.score(cand[None])[0])
                if s_new < s:
                    v, u, moved = v + step * delta, cand, True
                    slow = s_new > 0.5 * s
                    s = s_new
                    break
                step *= 0.5
            if not moved or s <= tol:
                progressed = progressed or moved
                break
            progressed = True
            if slow:
                break  # a fresh Jacobian converges faster than a slow chord
        if not progressed:
            break
    return u, used


def label_point(field: ReducedField, u: torch.Tensor) -> tuple[dict, torch.Tensor]:
    """Score, ρ = ⟨u, F(u)⟩ and the spectrum label at one direction, and the tangent Jacobian used."""
    J = tangent_jacobian(field, u)
    ev = torch.linalg.eigvals(J)
    f = field.ambient(u[None])[0]
    return {"score": float(field.score(u[None])[0]), "rho": float(f @ u), **classify(ev)}, J


def find_candidates(field: ReducedField, seeds: torch.Tensor, sources: Sequence[str], *, threshold: float = 0.05,
                    steps: int = 1500, lr: float = 0.05, refine_iters: int = 4, refine_tol: float = 1e-10,
                    dedup_tol: float = 1e-3, stats: dict | None = None) -> list[dict]:
    """Search from ``seeds`` (n, d), keep s ≤ threshold, de-duplicate, label, refine and label again.

    One row per distinct kept candidate: ``source`` of its best seed, ``n_seeds`` that reached it, score,
    label, saddle index ``n_pos`` (expanding directions), spectrum extremes; ``refined_*`` after refinement,
    ``survives`` and ``angle_deg``. Rows carry the unit vector under ``u`` (a list) for later use.
    ``stats`` (a dict, optional) receives the seed count, how many ended at s ≤ threshold and the end-score
    quantiles — how well the search converged.
    """
    check_threshold(threshold)
    ends = minimise_score(field, seeds, steps=steps, lr=lr)
    with torch.no_grad():
        scores = field.score(ends)
    ok = torch.nonzero(scores <= threshold).flatten()
    if stats is not None:
        q = torch.quantile(scores, torch.tensor([0.0, 0.5], dtype=scores.dtype))
        stats.update({"seeds": int(scores.numel()), "seeds_below": int(ok.numel()),
                      "end_score_min": float(q[0]), "end_score_median": float(q[1])})
    if ok.numel() == 0:
        return []
    pts, sc = ends[ok], scores[ok]
    keep = dedup(pts, sc, dedup_tol)
    rows = []
    for k in keep:
        u = pts[k]
        hits = [int(ok[j]) for j in range(len(ok)) if float(pts[j] @ u) > 1 - dedup_tol]
        lab0, J0 = label_point(field, u)
        row = {"source": sources[int(ok[k])], "n_seeds": len(hits), **lab0}
        ur, iters = refine(field, u, refine_iters, refine_tol, J=J0)
        lab, _ = label_point(field, ur)
        row.update({f"refined_{key}": v for key, v in lab.items()})
        row.update({"refine_jacobians": iters, "converged": lab["score"] <= max(refine_tol * 100, 1e-8),
                    "survives": lab["label"] == row["label"],
                    "angle_deg": math.degrees(math.acos(max(-1.0, min(1.0, float(u @ ur))))),
                    "duplicate_of": None, "u": ur.tolist()})
        for j, prev in enumerate(rows):
            if prev["converged"] and row["converged"] and prev["duplicate_of"] is None and \
                    float(torch.tensor(prev["u"], dtype=torch.float64) @ ur) > 1 - 1e-8:
                row["duplicate_of"] = j
                break
        rows.append(row)
    return rows


def summarise(rows: list[dict], key: str = "label") -> dict:
    """A/S/R counts and the S-like fraction of candidate rows (``key`` = label), or of the distinct converged
    refined roots (``key`` = refined_label)."""
    if key == "refined_label":
        rows = [r for r in rows if r["converged"] and r["duplicate_of"] is None]
    n = len(rows)
    counts = {lab: sum(r[key] == lab for r in rows) for lab in LABELS}
    return {"n": n, **counts, "s_fraction": counts["S"] / n if n else math.nan}


def ov_exact(V: torch.Tensor, imag_tol: float = 1e-9, zero_tol: float = 1e-9) -> dict:
    """The exact critical set of g_OV(u) = P_u V u: ±(real eigenvectors of V); the tangent spectrum at the
    eigenvector of λ_i is {λ_j − λ_i, j ≠ i} (block-triangular V in the basis [u, B]), so labels follow from
    eig(V) alone. An independent check of the finder on the attention-only field.

    Zero eigenvalues (|λ| ≤ ``zero_tol``·max|λ|; e.g. GQA makes rank V ≤ n_kv·d_head) are not counted: their
    eigenspace is a whole sphere of non-isolated zeros where F = V u = 0 itself (``null_dim`` reports its size).
    """
    ev = torch.linalg.eigvals(V)
    scale = ev.abs().max()
    zero = ev.abs() <= zero_tol * scale
    real = ((ev.imag.abs() <= imag_tol * scale) & ~zero).nonzero().flatten().tolist()
    counts = dict.fromkeys(LABELS, 0)
    for i in real:
        lab = classify(torch.cat([ev[:i], ev[i + 1:]]) - ev[i].real)["label"]
        counts[lab] += 2  # +u and −u
    n = 2 * len(real)
    return {"n": n, **counts, "s_fraction": counts["S"] / n if n else math.nan, "real_eigenvalues": len(real),
            "null_dim": int(zero.sum()), "rank": int(torch.linalg.matrix_rank(V))}


@torch.no_grad()
def token_states(model, ids: torch.Tensor, layer: int, points: Sequence[str] = ("resid_pre",),
                 with_bos: bool = False, batch_size: int = 4) -> list[torch.Tensor]:
    """The tensors at ``points`` of ``layer`` for every token of the windows ``ids`` (one (tokens, d) float64
    tensor per point, in token order; position 0 left out unless ``with_bos``), through ``attach_hooks``."""
    check_positions(model, ids.shape[-1], "window length")

    got: list[list[torch.Tensor]] = [[] for _ in points]

    def grab(store: list[torch.Tensor]):
        def fn(x, ctx):
            store.append((x if with_bos else x[:, 1:]).reshape(-1, x.shape[-1]).double().cpu())
        return fn

    removers = []
    try:
        for point, store in zip(points, got, strict=True):
            removers.append(attach_hooks(model, point, [layer], grab(store)))
        device = input_device(model)
        for i in range(0, ids.shape[0], batch_size):
            model(input_ids=ids[i : i + batch_size].to(device), use_cache=False)
    finally:
        for remove in reversed(removers):
            remove()
    return [torch.cat(store) for store in got]


@torch.no_grad()
def residual_seeds(model, ids: torch.Tensor, layer: int, n: int, seed: int = 0, with_bos: bool = False,
                   batch_size: int = 4) -> torch.Tensor:
    """n unit block inputs (``resid_pre`` at ``layer``) of real tokens, drawn without replacement by
    ``numpy.random.default_rng(seed)`` from the windows ``ids``; position 0 is left out unless ``with_bos``."""
    (pool,) = token_states(model, ids, layer, ("resid_pre",), with_bos=with_bos, batch_size=batch_size)
    if n > pool.shape[0]:
        raise GeosteerError(f"asked for {n} residual seeds but the windows hold only {pool.shape[0]} tokens")
    pick = np.random.default_rng(seed).choice(pool.shape[0], size=n, replace=False)
    x = pool[torch.from_numpy(pick)]
    return x / x.norm(dim=-1, keepdim=True)


def critical_study(model, ids: torch.Tensor | None, layers: Sequence[int], kinds: Sequence[str] = ("ov", "ffn", "full"),
                   *, alpha: float = 1.0, n_real: int = 32, n_random: int = 32, seed: int = 0,
                   with_bos: bool = False, ov_norm: str = "gain", threshold: float = 0.05, steps: int = 300,
                   lr: float = 0.05, refine_iters: int = 4, log=None) -> tuple[list[dict], list[dict]]:
    """Candidates of every field at every layer from the same seeds; returns (candidate rows, summary rows).

    Summary rows: per (layer, field) and per field over all layers, A/S/R counts and S-like fraction before
    (``stage = "candidate"``) and after refinement (``"refined"``), and for ``ov`` the exact set (``"exact"``).
    """
    import time

    check_threshold(threshold)
    if n_real < 0 or n_random < 0 or n_real + n_random == 0:
        raise GeosteerError(f"need n_real, n_random >= 0 and at least one seed (got {n_real}, {n_random})")
    if n_real and ids is None:
        raise GeosteerError("residual seeds need token windows")
    cand: list[dict] = []
    summ: list[dict] = []
    for layer in layers:
        fields = layer_fields(model, layer, kinds, alpha=alpha, ov_norm=ov_norm)
        d = next(iter(fields.values())).d
        parts, sources = [], []
        if n_real:
            parts.append(residual_seeds(model, ids, layer, n_real, seed, with_bos))
            sources += ["residual"] * n_real
        if n_random:
            parts.append(random_seeds(n_random, d, seed))
            sources += ["random"] * n_random
        seeds = torch.cat(parts)
        for kind, field in fields.items():
            t0 = time.perf_counter()
            st: dict = {}
            rows = find_candidates(field, seeds, sources, threshold=threshold, steps=steps, lr=lr,
                                   refine_iters=refine_iters, stats=st)
            secs = time.perf_counter() - t0
            for i, r in enumerate(rows):
                cand.append({"layer": layer, "field": kind, "alpha": alpha, "candidate": i, **r})
            for stage, key in (("candidate", "label"), ("refined", "refined_label")):
                summ.append({"layer": layer, "field": kind, "stage": stage, **summarise(rows, key),
                             "survived": sum(r["survives"] for r in rows), "seconds": secs, **st})
            if kind == "ov":
                summ.append({"layer": layer, "field": kind, "stage": "exact", **ov_exact(field.V)})
            if log:
                log(f"layer {layer} {kind}: {len(rows)} candidates in {secs:.1f}s")
    for kind in kinds:
        for stage in ("candidate", "refined", "exact"):
            sel = [s for s in summ if s["field"] == kind and s["stage"] == stage and s["layer"] != "all"]
            if not sel:
                continue
            tot = {lab: sum(s[lab] for s in sel) for lab in LABELS}
            n = sum(s["n"] for s in sel)
            summ.append({"layer": "all", "field": kind, "stage": stage, "n": n, **tot,
                         "s_fraction": tot["S"] / n if n else math.nan})
    return cand, summ
