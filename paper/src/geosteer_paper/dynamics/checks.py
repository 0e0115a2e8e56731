"""Formula checks of paper 2 (``geosteer study checks``): each returns its largest absolute error against an
independent reference (numpy projectors, central finite differences, an explicit timing loop)."""

from __future__ import annotations

import numpy as np
import torch


def sphere_split_vs_numpy() -> float:
    """P_u v and the radial/tangential split (Eqs. 2, 19) against (I − u uᵀ) v built with numpy, and the
    split's completeness (tangential + radial = v), float64."""
    from geosteer.dynamics import sphere
    from geosteer_paper.reproduction.references import tangential_numpy

    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 7, 32, generator=g, dtype=torch.float64)
    phi = torch.randn(5, 7, 32, generator=g, dtype=torch.float64) * 3
    u = sphere.unit(x)
    ref_u = x.numpy() / np.linalg.norm(x.numpy(), axis=-1, keepdims=True)
    tan, rad = sphere.tangential(u, phi), sphere.radial(u, phi)
    return max(np.abs(u.numpy() - ref_u).max(), np.abs(tan.numpy() - tangential_numpy(ref_u, phi.numpy())).max(),
               (tan + rad - phi).abs().max().item())


def tangent_jacobian_vs_finite_differences(model, tok) -> float:
    """Eq. 8: the tangent Jacobian of the OV, FFN and full reduced fields of layer 1 (α = 0.7) at a random
    direction against central finite differences of the flow on the sphere."""
    from geosteer_paper.dynamics.critical import random_seeds
    from geosteer_paper.dynamics.fields import layer_fields, tangent_basis, tangent_jacobian
    from geosteer_paper.reproduction.references import finite_difference_tangent_jacobian

    worst = 0.0
    for field in layer_fields(model, 1, alpha=0.7).values():
        u = random_seeds(1, field.d, seed=11)[0]
        basis = tangent_basis(u)
        J = tangent_jacobian(field, u, basis)
        worst = max(worst, (J - finite_difference_tangent_jacobian(field, u, basis)).abs().max().item())
    return worst


def parallel_speedup_vs_loop() -> float:
    """T_par = max(T_A, T_Φ) per parallelised layer (Eq. 23): the estimated speed-up against an explicit
    loop, on random timings and random layer subsets."""
    from geosteer.dynamics.parallel import estimated_speedup
    from geosteer_paper.reproduction.references import parallel_speedup_loop

    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(50):
        n = int(rng.integers(1, 30))
        times = [{"layer": i, "t_attn": float(rng.uniform(0.1, 3)), "t_ffn": float(rng.uniform(0.1, 3))}
                 for i in range(n)]
        layers = [int(i) for i in rng.choice(n, size=int(rng.integers(0, n + 1)), replace=False)]
        worst = max(worst, abs(estimated_speedup(times, layers) - parallel_speedup_loop(times, layers)))
    return worst
