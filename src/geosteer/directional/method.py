"""What the directional-decomposition method adds (registered on import of ``geosteer.directional``)."""

from __future__ import annotations

from geosteer.methods import Method, RecipeKey, register_method


def _validate(v: dict) -> None:
    from geosteer.directional.config import check_site

    if v["scale_site"] is not None:
        check_site(v["scale_site"])


def _build(model, v: dict) -> list:
    if v["scale_site"] is None:
        return []
    from geosteer.directional.sites import ComponentScale
    from geosteer.models.anatomy import anatomy, parse_layers

    layers = parse_layers(v["scale_layers"], anatomy(model).n_layers)
    return [ComponentScale(v["scale_site"], v["scale_par"], v["scale_perp"], layers)]


METHOD = register_method(Method(
    name="directional",
    summary="directional decomposition: component scaling of updates parallel/perpendicular to the stream",
    keys=(
        RecipeKey("scale_site", None, "component scaling site (paper Eq. 11)", kind="text"),
        RecipeKey("scale_par", 1.0, "s∥", kind="number"),
        RecipeKey("scale_perp", 1.0, "s⊥", kind="number"),
        RecipeKey("scale_layers", None, "layers, e.g. all, 3, 0-5;9", kind="layers"),
    ),
    build=_build,
    validate=_validate,
    cli="geosteer.directional.cli",
))
