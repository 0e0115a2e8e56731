"""The matched levers of the decisive steering benchmark (:mod:`geosteer.bench.design`).

Every learned lever is trained by the one rule (:func:`geosteer.bench.training.fit_module`: the shared
preference objective, the same steps, texts, gradient clipping 1.0 and control-KL hinge) at the learning rate
chosen for it once on the dev concepts; the trainable levers sit at one parameter budget, about PEFT LoRA
rank 4 on q/v of every layer:

- ``lora``: PEFT LoRA rank 4 on ``q_proj`` and ``v_proj`` of every layer;
- ``surfaces-rank1``: attention-value surfaces S_d(q, k) on every layer, each K×K coefficient matrix of rank 1
  (C = u wᵀ, u starting at zero: the stock model), saved as a surfaces artifact (s is the recipe's
  ``surfaces_strength``);
- ``loreft``: LoReFT h + Rᵀ(W h + b − R h) after every layer at rank 7, saved as a LoReFT artifact
  (:mod:`geosteer.loreft`; s is the recipe's ``loreft_strength``);
- ``vector``: a preference-trained vector after the middle layer (d numbers: a vector cannot be matched), saved
  as steering vectors (s is the recipe's ``vector_scale``);
- ``caa``: the mean-difference vector after the middle layer (learns nothing);
- ``walls``: learned exact walls on zero surfaces (suppressed concepts only; on or off).

Each built lever has ``at(s)``: the point at strength s (the learned change × s; s = 0 is the stock model),
which :mod:`geosteer.bench.kl_match` bisects to the design's control-KL levels. Prompting and walls have no
strength: they are measured at their own control KL.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from geosteer.bench.design import EXPLORATORY
from geosteer.bench.registry import Point, Setup, fixed, no_interventions, recipe_point
from geosteer.models.anatomy import anatomy

LORA_RANK = 4
REFT_RANK = 7  # 30 layers x (2 x 7 x 576 + 7) = 242,130 on SmolLM2: LoRA rank 4 on q/v is 230,400
SURFACE_RANK = 1  # 30 x 576 surfaces x 2 x 7 = 241,920 on SmolLM2
SURFACE_GRID = 4
LEARNED = ("vector", "loreft", "lora", "surfaces-rank1")


@dataclass
class Built:
    """A lever made ready for one concept: ``at(s)`` (None: a lever measured only as it is, ``points``)."""

    name: str
    params: int
    at: Callable[[float], Point] | None = None
    points: list[Point] = field(default_factory=list)
    info: dict = field(default_factory=dict)
    cleanup: Callable[[], None] = lambda: None


def build_vector(s: Setup, lr: float) -> Built:
    from geosteer.bench.training import remove_artifact, train_vector

    folder, info = train_vector(s, lr=lr)

    def at(x: float) -> Point:
        return recipe_point("vector", x, {"vectors": folder, "vector_scale": x})
    return Built("vector", anatomy(s.model).d_model, at, info={"train": info["train"], "lr": lr},
                 cleanup=lambda: remove_artifact(folder))


def build_loreft(s: Setup, lr: float) -> Built:
    from geosteer.bench.training import remove_artifact, train_loreft

    folder, info = train_loreft(s, lr=lr, rank=REFT_RANK, layers=None)

    def at(x: float) -> Point:
        return recipe_point("loreft", x, {"loreft": folder, "loreft_strength": x})
    return Built("loreft", info["params"], at, info={"train": info["train"], "lr": lr},
                 cleanup=lambda: remove_artifact(folder))


def build_lora(s: Setup, lr: float) -> Built:
    from geosteer.bench.levers_learned import _LoraScale, _remove_lora, train_lora

    layers, base, n, last = train_lora(s, lr, target_modules=["q_proj", "v_proj"])

    def at(x: float) -> Point:
        return Point("lora", float(x), {}, fixed([_LoraScale(layers, base, float(x))]))
    return Built("lora", n, at, info={"train": last, "lr": lr}, cleanup=lambda: _remove_lora(s.model))


def build_surfaces(s: Setup, lr: float, rank: int | None = SURFACE_RANK, name: str = "surfaces-rank1") -> Built:
    """Surfaces learned from zero, each coefficient matrix of rank ``rank`` (None: unfactorised), saved as a
    surfaces artifact; its strength is the recipe's ``surfaces_strength`` (coefficients × s)."""
    from geosteer.bench.training import _artifact_folder, fit_module, remove_artifact
    from geosteer.manifold import ManifoldConfig, SurfaceBank, factorise, merge_factors, save, trained_parameters

    bank = SurfaceBank(ManifoldConfig.for_model(s.model, grid_size=SURFACE_GRID))  # S = 0: the stock model
    if rank is not None:
        bank = factorise(bank, rank, seed=s.seed)
    n = trained_parameters(bank)
    last = fit_module(s, bank, lr=lr, name=name)
    merge_factors(bank)  # plain, frozen coefficients from here on (a plain bank: frozen only)
    folder = str(save(bank, _artifact_folder(s, name), training={"objective": "bench preference", "lr": lr,
                                                                 "rank": rank}))

    def at(x: float) -> Point:
        return recipe_point(name, x, {"surfaces": folder, "surfaces_strength": x})
    return Built(name, n, at, info={"train": last, "lr": lr, "rank": rank}, cleanup=lambda: remove_artifact(folder))


def build_caa(s: Setup) -> Built:
    from geosteer.bench.prompts import training_texts
    from geosteer.vectors import extract

    layer = anatomy(s.model).n_layers // 2
    sv = extract(s.model, s.tok, positive=training_texts(s, s.toward), negative=training_texts(s, s.away),
                 layers=[layer], point="resid_post", method="mean_diff", positions="all")

    def at(m: float) -> Point:
        return Point("caa", float(m), {"layer": layer}, fixed([sv.with_(scale=float(m), layers=[layer])]))
    return Built("caa", 0, at, info={"layer": layer})


def instruction_for(concept) -> str:
    """The prompting lever's instruction for ``concept``: its own (a concept file's ``instruction``), else a
    sentence about its description."""
    from geosteer.bench.concepts import describe

    if getattr(concept, "instruction", None):
        return concept.instruction
    what = describe(concept)
    if concept.direction == "promote":
        return f"Whatever you are asked, make your answer about {what}."
    return f"Whatever you are asked, do not mention {what} in your answer."


def build_prompting(s: Setup) -> Built:
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
    if name in EXPLORATORY:
        return build_surfaces(s, float(lr), EXPLORATORY[name], name)
    return {"prompting": build_prompting, "caa": build_caa, "walls": build_walls}[name](s)
