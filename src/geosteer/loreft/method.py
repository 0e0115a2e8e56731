"""What the LoReFT method adds (registered on import of ``geosteer.loreft``)."""

from __future__ import annotations

import torch

from geosteer.errors import GeosteerError
from geosteer.loreft.artifact import LOREFT, load_loreft
from geosteer.loreft.intervention import LoReFT
from geosteer.methods import Method, RecipeKey, Verb, register_method
from geosteer.models.anatomy import anatomy


def _validate(v: dict) -> None:
    """``loreft_strength`` (a finite number: the recipe's check) only with ``loreft``."""
    if v["loreft"] is None and float(v["loreft_strength"]) != 1.0:
        raise GeosteerError("loreft_strength= needs loreft= (a LoReFT artifact folder)")


def _build(model, v: dict, *, force: bool = False) -> list:
    """The LoReFT artifact at ``loreft_strength`` (0: nothing attached)."""
    if v["loreft"] is None or float(v["loreft_strength"]) == 0:
        return []
    return [load_loreft(v["loreft"], model, force=force).with_(strength=float(v["loreft_strength"]))]


def _examples(model, folder) -> dict:
    """For the contract suite: a fresh LoReFT (W = R, b = 0: the stock model), then a random one."""
    n = anatomy(model).n_layers
    neutral = LoReFT.for_model(model, 2, [0, n - 1], seed=0)
    active = LoReFT.for_model(model, 2, [0, n - 1], seed=1)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        active.W.add_(0.3 * torch.randn(active.W.shape, generator=g))
        active.b.copy_(0.5 * torch.randn(active.b.shape, generator=g))
    return {"neutral": {"loreft": str(neutral.save(folder / "loreft-neutral"))},
            "active": {"loreft": str(active.save(folder / "loreft")), "loreft_strength": 1.5}}


METHOD = register_method(Method(
    name="loreft",
    summary="LoReFT: low-rank representation fine-tuning, h + s·Rᵀ(W h + b − R h) after chosen layers",
    keys=(
        RecipeKey("loreft", None, "LoReFT artifact folder (geosteer learn loreft)", kind="folder"),
        RecipeKey("loreft_strength", 1.0, "strength s of the learned edit (0: the stock model, 1: as trained)",
                  kind="number"),
    ),
    build=_build,
    validate=_validate,
    examples=_examples,
    learners=(Verb("loreft", "geosteer.loreft.cli:loreft_cmd"),),
    artifacts=(LOREFT,),
))
