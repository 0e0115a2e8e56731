"""What the FFN-steering-field method adds (registered on import of ``geosteer.dynamics``)."""

from __future__ import annotations

from geosteer.dynamics.gates import GATES
from geosteer.errors import GeosteerError
from geosteer.methods import Method, RecipeKey, Verb, register_method


def _validate(v: dict) -> None:
    from geosteer.dynamics.config import check_variant

    check_variant(v["mlp_variant"])
    if v["gates"] is None and float(v["gates_strength"]) != 1.0:
        raise GeosteerError("gates_strength= needs gates= (an FFN gate artifact folder)")


def _build(model, v: dict, *, force: bool = False) -> list:
    """FFN variant, gates (at ``gates_strength``; 0: none), gains, parallel layers: in this order. ``force``:
    gates recorded for another base model are used anyway."""
    from geosteer.models.anatomy import anatomy, parse_layers

    n = anatomy(model).n_layers
    out: list = []
    if v["mlp_variant"] != "full":
        from geosteer.dynamics.variants import FFNVariant

        out.append(FFNVariant(v["mlp_variant"], parse_layers(v["mlp_layers"], n)))
    if v["gates"] is not None and float(v["gates_strength"]) != 0:
        from geosteer.dynamics.gates import load_gates

        out.append(load_gates(v["gates"], model, force=force).at_strength(v["gates_strength"]))
    if v["beta_attn"] != 1.0 or v["alpha_mlp"] != 1.0:
        from geosteer.dynamics.variants import Gains

        out.append(Gains(v["beta_attn"], v["alpha_mlp"], parse_layers(v["gain_layers"], n)))
    if v["parallel_layers"] is not None:
        from geosteer.dynamics.variants import Parallelize

        out.append(Parallelize(parse_layers(v["parallel_layers"], n) or list(range(n))))
    return out


def _examples(model, folder) -> dict:
    """For the contract suite: gates of 1 and unit gains (the stock model), then gates and gains that differ."""
    import torch

    from geosteer.dynamics.gates import FFNGates

    neutral = FFNGates.for_model(model).save(folder / "gates-neutral")
    gates = FFNGates.for_model(model)
    with torch.no_grad():
        gates.alpha.copy_(torch.linspace(0.5, 1.5, gates.alpha.numel()))
    return {"neutral": {"gates": str(neutral), "beta_attn": 1.0, "alpha_mlp": 1.0},
            "active": {"gates": str(gates.save(folder / "gates")), "beta_attn": 0.8}}


METHOD = register_method(Method(
    name="dynamics",
    summary="FFN steering field: residual dynamics on the sphere",
    keys=(
        RecipeKey("mlp_variant", "full", "MLP (FFN) variant: full | zero | radial | tangential | attn_zero",
                  kind="text"),
        RecipeKey("mlp_layers", None, "layers of the variant", kind="layers"),
        RecipeKey("gates", None, "FFN gate artifact folder", kind="folder"),
        RecipeKey("gates_strength", 1.0, "strength s of the gates, α ← 1 + s·(α − 1) (0: the stock model, 1: as "
                  "trained)", kind="number"),
        RecipeKey("beta_attn", 1.0, "attention branch gain (App. C.1 Eq. 24)", kind="number"),
        RecipeKey("alpha_mlp", 1.0, "MLP (FFN) branch gain α_F", kind="number"),
        RecipeKey("gain_layers", None, "layers of the gains", kind="layers"),
        RecipeKey("parallel_layers", None, "layers replaced by the parallel surrogate (Eq. 22)", kind="layers"),
    ),
    build=_build,
    examples=_examples,
    validate=_validate,
    learners=(Verb("gates", "geosteer.dynamics.cli:gates_cmd"),),
    measures=(Verb("diagnose", "geosteer.dynamics.cli:diagnose_cmd"),),
    artifacts=(GATES,),
))
