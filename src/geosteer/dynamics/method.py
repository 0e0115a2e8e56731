"""What the FFN-steering-field method adds (registered on import of ``geosteer.dynamics``)."""

from __future__ import annotations

from geosteer.dynamics.gates import GATES, GATES_V0
from geosteer.methods import Method, RecipeKey, register_method


def _validate(v: dict) -> None:
    from geosteer.dynamics.config import check_variant

    check_variant(v["ffn_variant"])


def _build(model, v: dict) -> list:
    """FFN variant, gates, gains, parallel layers: in this order."""
    from geosteer.models.anatomy import anatomy, parse_layers

    n = anatomy(model).n_layers
    out: list = []
    if v["ffn_variant"] != "full":
        from geosteer.dynamics.variants import FFNVariant

        out.append(FFNVariant(v["ffn_variant"], parse_layers(v["ffn_layers"], n)))
    if v["gates"] is not None:
        from geosteer.dynamics.gates import load_gates

        out.append(load_gates(v["gates"], model))
    if v["beta_attn"] != 1.0 or v["alpha_ffn"] != 1.0:
        from geosteer.dynamics.variants import Gains

        out.append(Gains(v["beta_attn"], v["alpha_ffn"], parse_layers(v["gain_layers"], n)))
    if v["parallel_layers"] is not None:
        from geosteer.dynamics.variants import Parallelize

        out.append(Parallelize(parse_layers(v["parallel_layers"], n) or list(range(n))))
    return out


METHOD = register_method(Method(
    name="dynamics",
    summary="FFN steering field: residual dynamics on the sphere",
    keys=(
        RecipeKey("ffn_variant", "full", "full | zero | radial | tangential | attn_zero", kind="text"),
        RecipeKey("ffn_layers", None, "layers of the variant", kind="layers"),
        RecipeKey("gates", None, "FFN gate artifact folder", kind="folder"),
        RecipeKey("beta_attn", 1.0, "attention branch gain (App. C.1 Eq. 24)", kind="number"),
        RecipeKey("alpha_ffn", 1.0, "FFN branch gain", kind="number"),
        RecipeKey("gain_layers", None, "layers of the gains", kind="layers"),
        RecipeKey("parallel_layers", None, "layers replaced by the parallel surrogate (Eq. 22)", kind="layers"),
    ),
    build=_build,
    validate=_validate,
    cli="geosteer.dynamics.cli_register",
    artifacts=(GATES, GATES_V0),
))
