"""Attention manifolds: learned B-spline surfaces that modulate each value dimension (paper Eq. 2).

    bank = geosteer.manifold.install(model, grid_size=8, grid_range=(-4.0, 4.0))  # zero = stock model
    geosteer.manifold.save(bank, "artifacts/my-surfaces")
    with geosteer.steer(model, geosteer.manifold.load("artifacts/my-surfaces", model=model)): ...
"""

from geosteer.manifold.artifact import load, read_config, save
from geosteer.manifold.bank import SurfaceBank, attached_bank, install, uninstall
from geosteer.manifold.config import ManifoldConfig
from geosteer.manifold.method import METHOD, SURFACES

__all__ = ["METHOD", "SURFACES", "ManifoldConfig", "SurfaceBank", "attached_bank", "install", "load", "read_config",
           "save", "uninstall"]
