"""What the steering-vectors method adds (registered on import of ``geosteer.vectors``)."""

from __future__ import annotations

from geosteer.methods import Method, RecipeKey, Verb, register_method
from geosteer.vectors.artifact import VECTORS
from geosteer.vectors.config import MAX_TOKEN_INDEX


def _validate(v: dict) -> None:
    from geosteer.errors import GeosteerError
    from geosteer.vectors.config import ApplyConfig

    ApplyConfig(v["vector_scale"], v["vector_mode"], v["vector_from"], v["vector_phase"])
    if v["vectors"] is None and v["vector_layers"] is not None:
        raise GeosteerError("vector_layers= needs vectors= (a steering-vectors artifact folder)")


def _build(model, v: dict, *, force: bool = False) -> list:
    """The vectors with the recipe's apply settings; ``force``: also when recorded for another base model."""
    if v["vectors"] is None or float(v["vector_scale"]) == 0:
        return []
    from geosteer.models.anatomy import anatomy, parse_layers
    from geosteer.vectors.artifact import load_vectors

    sv = load_vectors(v["vectors"], model, force=force)
    layers = parse_layers(v["vector_layers"], anatomy(model).n_layers)
    return [sv.with_(scale=v["vector_scale"], mode=v["vector_mode"], from_token=v["vector_from"],
                     phase=v["vector_phase"], layers=layers)]


def _examples(model, folder) -> dict:
    """For the contract suite: zero vectors added (the stock model), then random ones."""
    import torch

    from geosteer.models.anatomy import anatomy
    from geosteer.models.loading import model_id
    from geosteer.vectors.apply import SteeringVectors

    an = anatomy(model)
    g = torch.Generator().manual_seed(0)

    def vectors(scale: float, name: str) -> str:
        sv = SteeringVectors({0: torch.randn(an.d_model, generator=g) * scale, 1: torch.randn(an.d_model, generator=g)
                              * scale}, base_model=model_id(model), d_model=an.d_model, n_layers=an.n_layers)
        return str(sv.save(folder / name))

    return {"neutral": {"vectors": vectors(0.0, "vectors-neutral")},
            "active": {"vectors": vectors(1.0, "vectors"), "vector_scale": 2.0}}


METHOD = register_method(Method(
    name="vectors",
    summary="steering vectors: CAA / DiffMean, PCA, probe directions added at a hook point",
    keys=(
        RecipeKey("vectors", None, "steering-vectors artifact folder", kind="folder"),
        RecipeKey("vector_scale", 1.0, "multiplier s (0: the stock model)", kind="number"),
        RecipeKey("vector_mode", "add", "add | ablate | ablate_add | norm_match", kind="text"),
        RecipeKey("vector_from", 0, "steer tokens from this index on", kind="number", bounds=(0, MAX_TOKEN_INDEX)),
        RecipeKey("vector_phase", "all", "all | prompt | generation", kind="text"),
        RecipeKey("vector_layers", None, "which of the artifact's layers (default: all it holds)", kind="layers"),
    ),
    build=_build,
    examples=_examples,
    validate=_validate,
    learners=(Verb("vectors", "geosteer.vectors.cli:vectors_cmd"),),
    artifacts=(VECTORS,),
))
