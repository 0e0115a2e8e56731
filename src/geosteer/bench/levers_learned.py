"""The learned levers: each trained once per concept on the shared objective (:mod:`geosteer.bench.training`),
then measured at the budget's strengths s (the learned change scaled by s; s = 0 is the stock model).

- ``vector``: a preference-trained steering vector after the middle layer, saved as steering vectors
  (:class:`geosteer.vectors.TrainableVectors`; s is the recipe's ``vector_scale``);
- ``loreft``: LoReFT, rank 4, after the middle layer, saved as a LoReFT artifact (:mod:`geosteer.loreft`; s is
  the recipe's ``loreft_strength``);
- ``lora``: PEFT LoRA, rank 4, on peft's default attention projections of every layer (s scales the
  adapters' ``scaling``);
- ``ffn-gates``: one gain per layer on the FFN update (:class:`geosteer.dynamics.FFNGates`), α ← 1 + s(α − 1);
- ``scales``: learned s∥/s⊥ per layer at ``attn_out`` (``geosteer.directional.steer_learn.learn_scales``),
  each scale ← 1 + s(scale − 1);
- ``surfaces``: steering surfaces learned from zero surfaces on every layer, grid 4
  (``geosteer.manifold.wall_learn_train.learn_walls``, dense mode, promote), coefficients × s;
- ``walls``: learned exact walls on zero surfaces suppressing the away texts (walls only suppress); on/off;
- ``surfaces-shipped``: the same dense run starting from the shipped surfaces (``--surfaces``); its
  strength-0 point is the shipped surfaces, not the stock model, so it is a separate, labelled row.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from geosteer import anatomy
from geosteer.bench.registry import Lever, Point, Prepared, Setup, fixed, recipe_point, register_lever

LORA_RANK = 4
REFT_RANK = 4
SURFACE_GRID = 4


def _middle(model) -> int:
    return anatomy(model).n_layers // 2


def _interpolated(module, params: dict[str, torch.Tensor], neutral: float, s: float, attach: bool = True):
    """Parameters set to neutral + s·(trained − neutral) while open (restored after)."""
    @contextlib.contextmanager
    def ctx() -> Iterator[list]:
        saved = {n: p.detach().clone() for n, p in params.items()}
        try:
            with torch.no_grad():
                for p in params.values():
                    p.copy_(neutral + s * (p - neutral))
            yield [module] if attach else []
        finally:
            with torch.no_grad():
                for n, p in params.items():
                    p.copy_(saved[n])
    return ctx


def _points(name: str, s: Setup, make, params: dict) -> list[Point]:
    return [Point(name, float(x), dict(params), make(float(x))) for x in s.budget.strengths]


def build_vector(s: Setup) -> Prepared:
    """The preference-trained vector, saved as steering vectors; its strength is ``vector_scale``."""
    from geosteer.bench.training import remove_artifact, train_vector

    folder, info = train_vector(s, lr=0.05)
    pts = [recipe_point("vector", x, {"vectors": folder, "vector_scale": x}, {"layer": info["layer"]})
           for x in s.budget.strengths]
    return Prepared(pts, anatomy(s.model).d_model, {"train": info["train"], "norm": info["norm"]},
                    cleanup=lambda: remove_artifact(folder))


def build_loreft(s: Setup) -> Prepared:
    """LoReFT after the middle layer, saved as a LoReFT artifact; its strength is ``loreft_strength``."""
    from geosteer.bench.training import remove_artifact, train_loreft

    layer = _middle(s.model)
    folder, info = train_loreft(s, lr=0.002, rank=REFT_RANK, layers=[layer])
    pts = [recipe_point("loreft", x, {"loreft": folder, "loreft_strength": x}, {"layer": layer, "rank": REFT_RANK})
           for x in s.budget.strengths]
    return Prepared(pts, info["params"], {"train": info["train"]}, cleanup=lambda: remove_artifact(folder))


class _LoraScale:
    """The injected LoRA adapters' ``scaling`` multiplied by s while attached (0 otherwise: the stock model)."""

    def __init__(self, layers: list, base: list[float], s: float = 0.0) -> None:
        self.layers, self.base, self.s = layers, base, s

    def set(self, s: float) -> None:
        for m, b in zip(self.layers, self.base, strict=True):
            m.scaling["default"] = b * s

    def attach(self, model):
        self.set(self.s)
        return lambda: self.set(0.0)


def train_lora(s: Setup, lr: float, target_modules: list[str] | None = None, name: str = "lora"):
    """PEFT LoRA (rank :data:`LORA_RANK`) injected into ``s.model`` and trained on the shared objective:
    (adapter layers, their base scalings, trainable count, last logged step), the adapters off (scale 0)."""
    from geosteer.extras import require

    require("peft")
    from peft import LoraConfig, inject_adapter_in_model
    from peft.tuners.lora import LoraLayer
    from torch import nn

    from geosteer.bench.training import fit_module

    model = s.model
    before = {id(m) for m in model.modules()}
    inject_adapter_in_model(LoraConfig(r=LORA_RANK, lora_alpha=2 * LORA_RANK, lora_dropout=0.0,
                                       target_modules=target_modules), model)
    layers = [m for m in model.modules() if isinstance(m, LoraLayer) and id(m) not in before]
    base = [float(m.scaling["default"]) for m in layers]
    trainable = nn.ModuleList([m.lora_B for m in layers] + [m.lora_A for m in layers])
    switch = _LoraScale(layers, base, 1.0)

    class _Trainable(nn.Module):  # the adapters as one module that attaches at full scale
        def __init__(self):
            super().__init__()
            self.adapters = trainable

        def attach(self, model):
            return switch.attach(model)

    try:
        last = fit_module(s, _Trainable(), lr=lr, name=name)
    except BaseException:
        _remove_lora(model)
        raise
    switch.set(0.0)
    return layers, base, sum(p.numel() for p in trainable.parameters()), last


def build_lora(s: Setup) -> Prepared:
    layers, base, n, last = train_lora(s, lr=0.005)
    pts = [Point("lora", float(x), {"rank": LORA_RANK}, fixed([_LoraScale(layers, base, float(x))]))
           for x in s.budget.strengths]
    return Prepared(pts, n, {"train": last, "modules": len(layers)}, cleanup=lambda: _remove_lora(s.model))


def _remove_lora(model) -> None:
    """Put the original linear layers back (the model is the stock model again)."""
    from peft.tuners.lora import LoraLayer

    for name, m in list(model.named_modules()):
        if isinstance(m, LoraLayer):
            parent = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
            setattr(parent, name.rsplit(".", 1)[-1], m.get_base_layer())
    if "peft_config" in model.__dict__:
        del model.peft_config


def build_gates(s: Setup) -> Prepared:
    from geosteer.bench.training import fit_module
    from geosteer.dynamics import FFNGates

    gates = FFNGates.for_model(s.model)
    last = fit_module(s, gates, lr=0.02, name="ffn-gates")
    return Prepared(_points("ffn-gates", s, lambda x: _interpolated(gates, {"alpha": gates.alpha}, 1.0, x),
                            {"layers": "all"}), gates.alpha.numel(), {"train": last})


def build_scales(s: Setup) -> Prepared:
    from geosteer.bench.prompts import training_pairs
    from geosteer.directional.steer_learn import ScaleLearnConfig, learn_scales

    out = s.work / "scales"
    cfg = ScaleLearnConfig(site="attn_out", steps=s.budget.steps, lr=0.02, kl_threshold=s.train_tau,
                           seed=s.seed, checkpoint_every=0)
    sc, report = learn_scales(s.model, s.tok, training_pairs(s, s.toward), s.train_controls, cfg, out,
                              negatives=training_pairs(s, s.away), overwrite=True, log=None)
    sc.requires_grad_(False)
    params = {"s_par": sc.s_par, "s_perp": sc.s_perp}
    return Prepared(_points("scales", s, lambda x: _interpolated(sc, params, 1.0, x), {"site": "attn_out"}),
                    sc.s_par.numel() + sc.s_perp.numel(), {"train_eval": report.get("train_eval")})


def _learn_dense(s: Setup, bank, name: str, mode: str = "dense"):
    from geosteer.bench.prompts import training_pairs
    from geosteer.manifold.wall_learn import WallLearnConfig
    from geosteer.manifold.wall_learn_train import learn_walls

    promote = mode == "dense"
    cfg = WallLearnConfig(mode=mode, steps=s.budget.steps, lr=0.02 if promote else 0.1,
                          kl_threshold=s.train_tau, seed=s.seed, add_bos=True, checkpoint_every=0,
                          sparsity=0.0 if promote else 0.002, candidates=64)
    targets = training_pairs(s, s.toward if promote else s.away)
    bank, report = learn_walls(s.model, s.tok, bank, targets, s.train_controls, cfg, s.work / name,
                               overwrite=True, promote=promote,
                               negatives=training_pairs(s, s.away) if promote else None, log=None)
    bank.coefficients.requires_grad_(False)
    return bank, report


def _zero_bank(model):
    from geosteer.manifold import ManifoldConfig, SurfaceBank

    return SurfaceBank(ManifoldConfig.for_model(model, grid_size=SURFACE_GRID))


def build_surfaces(s: Setup) -> Prepared:
    bank, report = _learn_dense(s, _zero_bank(s.model), "surfaces")
    pts = _points("surfaces", s, lambda x: _interpolated(bank, {"c": bank.coefficients}, 0.0, x),
                  {"grid": SURFACE_GRID, "layers": "all"})
    return Prepared(pts, bank.n_parameters(), {"train_eval": report.get("train_eval")})


def build_walls(s: Setup) -> Prepared:
    """Walls on zero surfaces; strength 0 is those zero surfaces with the walls taken off."""
    bank, report = _learn_dense(s, _zero_bank(s.model), "walls", mode="walls")
    walls = list(bank.walls)

    def make(on: bool):
        @contextlib.contextmanager
        def ctx() -> Iterator[list]:
            bank.set_walls(walls if on else [])
            try:
                yield [bank]
            finally:
                bank.set_walls(walls)
        return ctx
    pts = [Point("walls", 0.0, {"walls": 0}, make(False))] if 0.0 in s.budget.strengths else []
    pts += [Point("walls", 1.0, {"walls": len(walls)}, make(True))] if walls else []
    return Prepared(pts, 5 * len(report.get("candidates") or []),
                    {"walls": len(walls), "train_eval": report.get("train_eval")})


def build_shipped(s: Setup) -> Prepared:
    from geosteer.errors import GeosteerError
    from geosteer.manifold import load

    if not s.surfaces:
        raise GeosteerError("the surfaces-shipped lever needs --surfaces DIR (the surfaces to start from)")
    start = load(s.surfaces, model=s.model)
    shipped = start.coefficients.detach().clone()
    bank, report = _learn_dense(s, start, "surfaces-shipped")
    learned = bank.coefficients.detach().clone()

    def make(x: float):
        @contextlib.contextmanager
        def ctx() -> Iterator[list]:
            with torch.no_grad():
                bank.coefficients.copy_(shipped + x * (learned - shipped))
            yield [bank]
        return ctx
    pts = [Point("surfaces-shipped", 0.0, {"start": "shipped"}, make(0.0))] + _points(
        "surfaces-shipped", s, make, {"start": "shipped"})
    return Prepared(pts, bank.n_parameters(), {"train_eval": report.get("train_eval")})


register_lever(Lever("vector", build_vector, "preference-trained steering vector (BiPO/RePS style), one layer"))
# loreft version 3: geosteer.loreft's starting R
register_lever(Lever("loreft", build_loreft, f"LoReFT rank {REFT_RANK}, one layer", version=3))
register_lever(Lever("lora", build_lora, f"PEFT LoRA rank {LORA_RANK}, attention projections", needs="peft"))
register_lever(Lever("ffn-gates", build_gates, "learned FFN gain per layer (FFN edit)"))
register_lever(Lever("scales", build_scales, "learned ∥/⊥ scales per layer at attn_out"))
register_lever(Lever("surfaces", build_surfaces, "steering surfaces learned from zero surfaces"))
register_lever(Lever("walls", build_walls, "learned exact walls (suppress the away texts)"))
register_lever(Lever("surfaces-shipped", build_shipped, "steering surfaces learned from the shipped surfaces "
                     "(labelled: its start is not the stock model)"))
