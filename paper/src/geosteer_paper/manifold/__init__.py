"""The paper studies and formula checks of attention manifolds: ``geosteer study manifold ...``,
``geosteer study checks``."""

from __future__ import annotations

from geosteer.models.tiny import TINY_FAMILIES
from geosteer_paper.registry import Check, Study, register_paper

STUDIES = (
    Study("strength", "geosteer_paper.manifold.studies:strength",
          "Table 6: greedy change rate vs surface strength (coefficients scaled 0.1…1)"),
    Study("asymmetry", "geosteer_paper.manifold.studies:asymmetry", "§6: asymmetry S(q, k) ≠ S(k, q) per layer"),
)

_CHECKS = "geosteer_paper.manifold.checks"
CHECKS = (
    Check("1.1", "model with random surfaces vs per-pair attention", f"{_CHECKS}:model_vs_per_pair", 1e-4,
          tuple(TINY_FAMILIES)),
    Check("1.2", "B-spline basis vs scipy BSpline.basis_element", f"{_CHECKS}:basis_vs_scipy", 1e-12),
    Check("1.3", "zero surfaces vs stock logits", f"{_CHECKS}:zero_surfaces_vs_stock", 0.0, tuple(TINY_FAMILIES)),
    Check("1.4", "factored kernel vs per-pair reference (4 masks)", f"{_CHECKS}:factored_vs_per_pair", 1e-5),
    Check("1.4", "factored kernel gradients vs per-pair reference (float64)",
          f"{_CHECKS}:factored_gradients_vs_per_pair", 1e-9),
)

register_paper("manifold", STUDIES, CHECKS)
