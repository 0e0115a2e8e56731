"""Attention manifolds: learned B-spline surfaces that modulate each value dimension.

o_id = Σ_j a_ij v_jd (1 + S_d(q_id, k_jd)) with S_d(q, k) = Σ_ab C_dab B_a(q) B_b(k) on post-RoPE q/k,
computed exactly in factored form (``geosteer.kernels.exact``), with KV-cache decoding.

    bank = geosteer.manifold.install(model, grid_size=8, grid_range=(-4.0, 4.0))  # zero = stock model
    geosteer.manifold.save(bank, "artifacts/my-surfaces")
    bank = geosteer.manifold.load("artifacts/my-surfaces", model=model)
    geosteer.manifold.uninstall(model)           # install/uninstall: persistent
    with geosteer.steer(model, bank): ...         # bank.attach(model) -> remove: for this block only
"""

from geosteer.manifold.artifact import load, read_config, save
from geosteer.manifold.bank import SurfaceBank, attached_bank, install, uninstall
from geosteer.manifold.config import ManifoldConfig
from geosteer.manifold.method import METHOD, SURFACES

__all__ = ["METHOD", "SURFACES", "ManifoldConfig", "SurfaceBank", "attached_bank", "install", "load", "read_config",
           "save", "uninstall"]
