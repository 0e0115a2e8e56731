"""Variants of the learned steering surfaces, each a lever of its own (same objective, same budget, same
operating-point rule as every lever; trainable parameters counted):

- ``surfaces-rank1`` / ``surfaces-rank2``: surfaces learned from zero in rank-r form, each K×K coefficient
  matrix C = U Wᵀ with U, W of shape (K, r) (:mod:`geosteer.manifold.low_rank_train`: U starts at zero, so
  the start is the stock model); 2·r·K numbers per surface (rank 1 on every layer is about LoRA rank 4's count);
- ``surfaces-layers``: surfaces learned on one third of the layers (early, middle, late), each third trained
  on its own; the third and the strength are candidates of the operating-point rule (as CAA's layer);
- ``surfaces+vector``: surfaces and a steering vector after the middle layer, learned together;
- ``surfaces-kl``: the surfaces with the training objective's control-KL hinge five times tighter
  (τ = ``train_tau`` / 5).

They are trained by :func:`geosteer.bench.training.fit_module` (the shared objective, as the vector, LoReFT
and LoRA are); the ``surfaces`` lever itself trains through ``learn steering-surfaces``'s learner. Strength s
scales the learned change (s = 0: the stock model).
"""

from __future__ import annotations

import dataclasses

from torch import nn

from geosteer.bench.levers_learned import SURFACE_GRID, _interpolated, _points
from geosteer.bench.registry import Lever, Point, Prepared, Setup, register_lever

LR = 0.02  # the surfaces' learning rate (as the surfaces lever)
THIRDS = ("early", "middle", "late")


def _bank(model, layers=None):
    from geosteer.manifold import ManifoldConfig, SurfaceBank

    return SurfaceBank(ManifoldConfig.for_model(model, grid_size=SURFACE_GRID, layers=layers))


def _fit_bank(s: Setup, bank, name: str, lr: float = LR) -> dict:
    from geosteer.bench.training import fit_module

    bank.coefficients.requires_grad_(True)
    return fit_module(s, bank, lr=lr, name=name)


def _scaled_points(name: str, s: Setup, bank, params: dict) -> list[Point]:
    return _points(name, s, lambda x: _interpolated(bank, {"c": bank.coefficients}, 0.0, x), params)


def _rank(r: int):
    def build(s: Setup) -> Prepared:
        from geosteer.manifold.low_rank_train import factorise, merge_factors, trained_parameters

        bank = factorise(_bank(s.model), r, seed=s.seed)
        n = trained_parameters(bank)
        from geosteer.bench.training import fit_module

        last = fit_module(s, bank, lr=LR, name=f"surfaces-rank{r}")  # trains the factors
        merge_factors(bank)  # plain coefficients of rank <= r from here on
        return Prepared(_scaled_points(f"surfaces-rank{r}", s, bank, {"rank": r, "grid": SURFACE_GRID}), n,
                        {"train": last})
    return build


def third_layers(n_layers: int) -> dict[str, list[int]]:
    """The layers split into three contiguous thirds (early, middle, late)."""
    cuts = [round(i * n_layers / 3) for i in range(4)]
    return {name: list(range(cuts[i], cuts[i + 1])) for i, name in enumerate(THIRDS)}


def build_layers(s: Setup) -> Prepared:
    from geosteer.models.anatomy import anatomy

    points, params, info = [], 0, {}
    for name, layers in third_layers(anatomy(s.model).n_layers).items():
        if not layers:  # fewer than three layers
            continue
        bank = _bank(s.model, layers)
        info[name] = _fit_bank(s, bank, f"surfaces-layers-{name}")
        bank.coefficients.requires_grad_(False)
        params = max(params, bank.n_parameters())
        points += _scaled_points("surfaces-layers", s, bank, {"layers": f"{layers[0]}-{layers[-1]}",
                                                              "grid": SURFACE_GRID})
    return Prepared(points, params, {"train": info, "params": "the largest third's coefficients"})


class _SurfacesAndVector(nn.Module):
    """A surface bank and a steering vector, attached (and trained) together."""

    def __init__(self, bank, vector) -> None:
        super().__init__()
        self.bank, self.vector = bank, vector

    def attach(self, model):
        removes = [self.bank.attach(model), self.vector.attach(model)]
        return lambda: [r() for r in reversed(removes)]


def build_surfaces_vector(s: Setup) -> Prepared:
    """Surfaces and a middle-layer vector trained together; the vector is saved as steering vectors, and s
    scales both (the coefficients × s, ``vector_scale`` = s)."""
    import contextlib

    from geosteer.bench.training import fit_module, remove_artifact, save_vector, vector_module
    from geosteer.recipe import InterventionSpec

    both = _SurfacesAndVector(_bank(s.model), vector_module(s))
    both.bank.coefficients.requires_grad_(True)
    last = fit_module(s, both, lr=LR, name="surfaces+vector")
    folder = save_vector(s, both.vector, "surfaces+vector")
    layer = both.vector.layers[0]

    def make(x: float):
        @contextlib.contextmanager
        def ctx():
            with _interpolated(both.bank, {"c": both.bank.coefficients}, 0.0, x)() as ivs:
                yield [*ivs, InterventionSpec(vectors=folder, vector_scale=x)]
        return ctx
    n = both.bank.n_parameters() + both.vector.vectors.numel()
    return Prepared(_points("surfaces+vector", s, make, {"layer": layer, "grid": SURFACE_GRID}), n,
                    {"train": last}, cleanup=lambda: remove_artifact(folder))


def build_kl(s: Setup) -> Prepared:
    tight = dataclasses.replace(s, train_tau=s.train_tau / 5)
    bank = _bank(s.model)
    last = _fit_bank(tight, bank, "surfaces-kl")
    bank.coefficients.requires_grad_(False)
    return Prepared(_scaled_points("surfaces-kl", s, bank, {"grid": SURFACE_GRID, "tau": tight.train_tau}),
                    bank.n_parameters(), {"train": last})


register_lever(Lever("surfaces-rank1", _rank(1), "steering surfaces learned in rank-1 form (about LoRA's count)"))
register_lever(Lever("surfaces-rank2", _rank(2), "steering surfaces learned in rank-2 form"))
register_lever(Lever("surfaces-layers", build_layers, "steering surfaces on one third of the layers, the third "
                     "chosen on validation"))
register_lever(Lever("surfaces+vector", build_surfaces_vector, "steering surfaces and a middle-layer vector, "
                     "learned together"))
register_lever(Lever("surfaces-kl", build_kl, "steering surfaces with a five times tighter control-KL hinge"))
