"""Attention manifolds: learned B-spline surfaces that modulate each value dimension (paper Eq. 2).

    bank = geosteer.manifold.install(model, grid_size=8, grid_range=(-4.0, 4.0))  # zero = stock model
    geosteer.manifold.save(bank, "artifacts/my-surfaces")
    with geosteer.steer(model, geosteer.manifold.load("artifacts/my-surfaces", model=model)): ...
"""

from geosteer.manifold.artifact import load, read_config, save
from geosteer.manifold.bank import SurfaceBank, attached_bank, install, uninstall
from geosteer.manifold.config import ManifoldConfig
from geosteer.manifold.low_rank_train import factorise, merge_factors, trained_parameters
from geosteer.manifold.method import METHOD, SURFACES
from geosteer.manifold.wall_learn import WallLearnConfig
from geosteer.manifold.wall_learn_train import learn_walls

__all__ = ["METHOD", "SURFACES", "ManifoldConfig", "SurfaceBank", "WallLearnConfig", "attached_bank", "factorise",
           "install", "learn_walls", "load", "merge_factors", "read_config", "save", "trained_parameters",
           "uninstall"]
