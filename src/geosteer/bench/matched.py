"""The matched levers of the decisive benchmark (``geosteer bench decide``).

Every learned lever is trained by the one rule (:func:`geosteer.bench.training.fit_module`: the shared
preference objective, the same steps, texts, gradient clipping 1.0 and control-KL hinge) at the learning rate
chosen for it once on the dev concepts; the trainable levers sit at one parameter budget, about PEFT LoRA
rank 4 on q/v of every layer:

- ``lora``: PEFT LoRA rank 4 on ``q_proj`` and ``v_proj`` of every layer;
- ``surfaces-rank1``: attention-value surfaces S_d(q, k) on every layer, each K×K coefficient matrix of rank 1
  (C = u wᵀ, u starting at zero: the stock model);
- ``loreft``: LoReFT h + Rᵀ(W h + b − R h) after every layer at rank 7;
- ``vector``: a preference-trained vector after the middle layer (d numbers: a vector cannot be matched);
- ``caa``: the mean-difference vector after the middle layer (learns nothing);
- ``walls``: learned exact walls on zero surfaces (suppressed concepts only; on or off).

Each built lever has ``at(s)``: the point at strength s (the learned change × s; s = 0 is the stock model),
which :mod:`geosteer.bench.kl_match` bisects to the design's control-KL levels. Prompting and walls have no
strength: they are measured at their own control KL.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

from geosteer.bench.registry import Point, Setup, fixed, no_interventions

LORA_RANK = 4
REFT_RANK = 7  # 30 layers x (2 x 7 x 576 + 7) = 242,130 on SmolLM2: LoRA rank 4 on q/v is 230,400
SURFACE_RANK = 1  # 30 x 576 surfaces x 2 x 7 = 241,920 on SmolLM2
SURFACE_GRID = 4
LEARNED = ("vector", "loreft", "lora", "surfaces-rank1")
FIXED = ("stock", "prompting", "caa", "walls")


@dataclass
class Built:
    """A lever made ready for one concept: ``at(s)`` (None: a lever measured only as it is, ``points``)."""

    name: str
    params: int
    at: Callable[[float], Point] | None = None
    points: list[Point] = field(default_factory=list)
    info: dict = field(default_factory=dict)
    cleanup: Callable[[], None] = lambda: None


class MultiLoReFT(nn.Module):
    """LoReFT (:class:`geosteer.bench.modules.LoReFT`) after each of ``layers``, one strength for all."""

    def __init__(self, d_model: int, rank: int, layers: list[int], seed: int = 0) -> None:
        super().__init__()
        from geosteer.bench.modules import LoReFT

        self.units = nn.ModuleList([LoReFT(d_model, rank, layer, seed=seed + i) for i, layer in enumerate(layers)])

    @property
    def strength(self) -> float:
        return self.units[0].strength

    @strength.setter
    def strength(self, s: float) -> None:
        for u in self.units:
            u.strength = s

    def attach(self, model: nn.Module) -> Callable[[], None]:
        undo = [u.attach(model) for u in self.units]
        return lambda: [f() for f in reversed(undo)] and None

    def n_parameters(self) -> int:
        return sum(u.n_parameters() for u in self.units)


def _strength_attr(module, name: str) -> Callable[[float], Point]:
    def at(s: float) -> Point:
        @contextlib.contextmanager
        def ctx() -> Iterator[list]:
            old = module.strength
            module.strength = s
            try:
                yield [module]
            finally:
                module.strength = old
        return Point(name, float(s), {}, ctx)
    return at


def _anatomy(model):
    from geosteer.models.anatomy import anatomy

    return anatomy(model)


def build_vector(s: Setup, lr: float) -> Built:
    from geosteer.bench.modules import LearnedVector
    from geosteer.bench.training import fit_module

    a = _anatomy(s.model)
    mod = LearnedVector(a.d_model, a.n_layers // 2)
    last = fit_module(s, mod, lr=lr, name="vector")
    return Built("vector", mod.vector.numel(), _strength_attr(mod, "vector"), info={"train": last, "lr": lr})


def build_loreft(s: Setup, lr: float) -> Built:
    from geosteer.bench.training import fit_module

    a = _anatomy(s.model)
    mod = MultiLoReFT(a.d_model, REFT_RANK, list(range(a.n_layers)), seed=s.seed)
    last = fit_module(s, mod, lr=lr, name="loreft")
    return Built("loreft", mod.n_parameters(), _strength_attr(mod, "loreft"), info={"train": last, "lr": lr})


def build_lora(s: Setup, lr: float) -> Built:
    from geosteer.extras import require

    require("peft")
    from peft import LoraConfig, inject_adapter_in_model
    from peft.tuners.lora import LoraLayer

    from geosteer.bench.levers_learned import _LoraScale, _remove_lora
    from geosteer.bench.training import fit_module

    model = s.model
    before = {id(m) for m in model.modules()}
    inject_adapter_in_model(LoraConfig(r=LORA_RANK, lora_alpha=2 * LORA_RANK, lora_dropout=0.0,
                                       target_modules=["q_proj", "v_proj"]), model)
    layers = [m for m in model.modules() if isinstance(m, LoraLayer) and id(m) not in before]
    base = [float(m.scaling["default"]) for m in layers]
    trainable = nn.ModuleList([m.lora_B for m in layers] + [m.lora_A for m in layers])
    switch = _LoraScale(layers, base, 1.0)

    class _Trainable(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.adapters = trainable

        def attach(self, model):
            return switch.attach(model)

    try:
        last = fit_module(s, _Trainable(), lr=lr, name="lora")
    except BaseException:
        _remove_lora(model)
        raise
    switch.set(0.0)

    def at(x: float) -> Point:
        return Point("lora", float(x), {}, fixed([_LoraScale(layers, base, float(x))]))
    n = sum(p.numel() for p in trainable.parameters())
    return Built("lora", n, at, info={"train": last, "lr": lr}, cleanup=lambda: _remove_lora(model))


def build_surfaces(s: Setup, lr: float) -> Built:
    from geosteer.bench.levers_learned import _interpolated
    from geosteer.bench.training import fit_module
    from geosteer.manifold import ManifoldConfig, SurfaceBank
    from geosteer.manifold.low_rank_train import factorise, merge_factors, trained_parameters

    bank = factorise(SurfaceBank(ManifoldConfig.for_model(s.model, grid_size=SURFACE_GRID)), SURFACE_RANK,
                     seed=s.seed)
    n = trained_parameters(bank)
    last = fit_module(s, bank, lr=lr, name="surfaces-rank1")
    merge_factors(bank)

    def at(x: float) -> Point:
        return Point("surfaces-rank1", float(x), {}, _interpolated(bank, {"c": bank.coefficients}, 0.0, x))
    return Built("surfaces-rank1", n, at, info={"train": last, "lr": lr, "rank": SURFACE_RANK})


def build_caa(s: Setup) -> Built:
    from geosteer.bench.prompts import training_texts
    from geosteer.vectors import extract

    layer = _anatomy(s.model).n_layers // 2
    sv = extract(s.model, s.tok, positive=training_texts(s, s.toward), negative=training_texts(s, s.away),
                 layers=[layer], point="resid_post", method="mean_diff", positions="all")

    def at(m: float) -> Point:
        return Point("caa", float(m), {"layer": layer}, fixed([sv.with_(scale=float(m), layers=[layer])]))
    return Built("caa", 0, at, info={"layer": layer})


def build_prompting(s: Setup) -> Built:
    from geosteer.bench.levers import instruction_for

    text = instruction_for(s.concept)
    return Built("prompting", 0, points=[Point("prompting", 1.0, {}, no_interventions, instruction=text)],
                 info={"instruction": text})


def build_walls(s: Setup) -> Built:
    from geosteer.bench.levers_learned import build_walls as learn

    prepared = learn(s)
    on = [p for p in prepared.points if p.strength == 1.0]
    return Built("walls", prepared.params, points=on, info=prepared.info, cleanup=prepared.cleanup)


def build(name: str, s: Setup, lr: float | None = None) -> Built:
    """The lever ``name`` for one concept (``lr``: the learned levers' learning rate)."""
    torch.manual_seed(s.seed)  # every lever starts from the seed's random state
    if name in LEARNED:
        return {"vector": build_vector, "loreft": build_loreft, "lora": build_lora,
                "surfaces-rank1": build_surfaces}[name](s, float(lr))
    return {"prompting": build_prompting, "caa": build_caa, "walls": build_walls}[name](s)
