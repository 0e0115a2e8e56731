"""What the directional-decomposition method adds (registered on import of ``geosteer.directional``)."""

from __future__ import annotations

from geosteer.directional.config import DEFAULT_VALUE_SPACE
from geosteer.directional.scales_artifact import SCALES
from geosteer.errors import GeosteerError
from geosteer.methods import Method, RecipeKey, Verb, register_method


def _validate(v: dict) -> None:
    """``scale_site`` and ``scale_value_space`` checked; ``scale_learned_strength`` only with ``scale_learned``."""
    from geosteer.directional.config import check_site, check_value_space

    check_value_space(v["scale_value_space"])
    if v["scale_learned"] is None and float(v["scale_learned_strength"]) != 1.0:
        raise GeosteerError("scale_learned_strength= needs scale_learned= (a learned-scales artifact folder)")
    if v["scale_site"] is not None:
        check_site(v["scale_site"])


def _build(model, v: dict) -> list:
    if v["scale_site"] is None:
        return []
    from geosteer.directional.config import DEFAULT_VALUE_SPACE, VALUE_SITES
    from geosteer.directional.sites import ComponentScale
    from geosteer.models.anatomy import anatomy, parse_layers

    layers = parse_layers(v["scale_layers"], anatomy(model).n_layers)
    space = v["scale_value_space"] if v["scale_site"] in VALUE_SITES else DEFAULT_VALUE_SPACE
    return [ComponentScale(v["scale_site"], v["scale_par"], v["scale_perp"], layers, value_space=space)]


def _build_with_learned(model, v: dict, *, force: bool = False) -> list:
    """Learned per-layer scales (``scale_learned``, an artifact folder, at ``scale_learned_strength``; 0: none)
    first, then the fixed scaling."""
    out = []
    if v["scale_learned"] is not None and float(v["scale_learned_strength"]) != 0:
        from geosteer.directional.scales_artifact import load_scales

        out.append(load_scales(v["scale_learned"], model, force=force).at_strength(v["scale_learned_strength"]))
    return out + _build(model, v)


def _examples(model, folder) -> dict:
    """For the contract suite: s∥ = s⊥ = 1 (fixed and learned: the stock model), then other scales."""
    from geosteer.directional.learned import LearnedScales
    from geosteer.directional.scales_artifact import save_scales
    from geosteer.models.anatomy import anatomy
    from geosteer.models.loading import model_id

    n = anatomy(model).n_layers
    ones = save_scales(LearnedScales("resid_post", [0, n - 1]), folder / "scales-neutral", base_model=model_id(model))
    learned = save_scales(LearnedScales("resid_post", [0, n - 1], [0.5, 1.5], [1.2, 0.7]), folder / "scales",
                          base_model=model_id(model))
    return {"neutral": {"scale_learned": str(ones), "scale_site": "attn_out", "scale_par": 1.0, "scale_perp": 1.0},
            "active": {"scale_learned": str(learned), "scale_site": "attn_out", "scale_par": 0.5}}


METHOD = register_method(Method(
    name="directional",
    summary="directional decomposition: component scaling of updates parallel/perpendicular to the stream",
    keys=(
        RecipeKey("scale_learned", None, "learned per-layer s∥/s⊥ artifact folder (geosteer learn "
                  "scales)", kind="folder"),
        RecipeKey("scale_learned_strength", 1.0, "strength s of the learned scales, each ← 1 + s·(scale − 1) (0: "
                  "the stock model, 1: as trained)", kind="number"),
        RecipeKey("scale_site", None, "component scaling site (paper Eq. 11)", kind="text"),
        RecipeKey("scale_par", 1.0, "s∥", kind="number"),
        RecipeKey("scale_perp", 1.0, "s⊥", kind="number"),
        RecipeKey("scale_layers", None, "layers, e.g. all, 3, 0-5;9", kind="layers"),
        RecipeKey("scale_value_space", DEFAULT_VALUE_SPACE,
                  "value sites: head (each head's o_t against its own v_t) | concat (all heads at once)",
                  kind="text"),
    ),
    build=_build_with_learned,
    examples=_examples,
    validate=_validate,
    learners=(Verb("scales", "geosteer.directional.cli_learn:scales_cmd"),),
    measures=(Verb("decompose", "geosteer.directional.cli:decompose_cmd"),),
    artifacts=(SCALES,),
))
