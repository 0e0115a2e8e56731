"""What the directional-decomposition method adds (registered on import of ``geosteer.directional``)."""

from __future__ import annotations

from geosteer.directional.config import DEFAULT_VALUE_SPACE
from geosteer.directional.scales_artifact import SCALES
from geosteer.methods import Check, Method, RecipeKey, Study, register_method
from geosteer.models.tiny import TINY_FAMILIES


def _validate(v: dict) -> None:
    """``scale_site`` and ``scale_value_space`` checked."""
    from geosteer.directional.config import check_site, check_value_space

    check_value_space(v["scale_value_space"])
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
    """Learned per-layer scales (``scale_learned``, an artifact folder) first, then the fixed scaling."""
    out = []
    if v["scale_learned"] is not None:
        from geosteer.directional.scales_artifact import load_scales

        out.append(load_scales(v["scale_learned"], model, force=force))
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


def _study(name: str, module: str, function: str, paper: str) -> Study:
    return Study(name, f"geosteer.directional.studies.{module}:{function}", paper)


STUDIES = (
    _study("sweep", "sweep", "sweep_cmd", "Fig. 3: perplexity vs s∥ and s⊥ per site"),
    _study("pretrain", "pretrain", "pretrain_cmd", "Fig. 5, Table 3, Fig. 8: pretraining with the edit active"),
    _study("diagonal", "views", "diagonal_cmd", "Eq. 12, Table 5, Fig. 4: diagonal forms and maps"),
    _study("heads", "views", "heads_cmd", "Fig. 7: head localisation"),
    _study("strength", "views", "strength_cmd", "Table 6: applied strength"),
    _study("mlp-internal", "views", "mlp_internal_cmd", "App. D, Table 10: MLP-internal sites"),
    _study("plot", "views", "plot_cmd", "Figs 4 / 7 redrawn from a result file"),
    Study("steer-learn", "geosteer.directional.studies.steer:steer_learn_cmd",
          "the steering form of Eq. 11: per-layer s∥, s⊥ learned to promote a behaviour under a control-KL budget"),
)

_CHECKS = "geosteer.directional.checks"
_ALL = tuple(TINY_FAMILIES)
CHECKS = (
    Check("3.1", "projection onto z vs numpy least squares", f"{_CHECKS}:projection_vs_numpy", 1e-10),
    Check("3.2", "scaled attention update vs plain torch hooks", f"{_CHECKS}:residual_update_vs_plain_hooks",
          1e-5, _ALL),
    Check("3.5", "per-head value edit vs a per-token loop", f"{_CHECKS}:value_full_vs_loop", 2e-5, _ALL),
    Check("3.6", "exclude-self edit vs a per-token loop", f"{_CHECKS}:exclude_self_vs_loop", 2e-5, _ALL),
    Check("3.6", "self weight a_tt vs the materialised diagonal", f"{_CHECKS}:self_weight_vs_diagonal", 1e-6,
          _ALL),
    Check("3.7", "s∥ = s⊥ = 1 on every site vs stock logits", f"{_CHECKS}:neutral_vs_stock", 0.0, _ALL),
    Check("3.8", "diagonal form A + diag(ΔA) vs the edited output", f"{_CHECKS}:diagonal_form_vs_edit", 1e-5,
          _ALL),
)


METHOD = register_method(Method(
    name="directional",
    summary="directional decomposition: component scaling of updates parallel/perpendicular to the stream",
    keys=(
        RecipeKey("scale_learned", None, "learned per-layer s∥/s⊥ artifact folder (study directional "
                  "steer-learn)", kind="folder"),
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
    cli="geosteer.directional.cli",
    artifacts=(SCALES,),
    studies=STUDIES,
    checks=CHECKS,
))
