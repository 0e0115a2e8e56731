"""What the attention-manifold method adds to geosteer (registered on import of ``geosteer.manifold``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from geosteer.errors import GeosteerError
from geosteer.manifold.artifact import SURFACES
from geosteer.manifold.surface_checks import check_surfaces
from geosteer.methods import Method, RecipeKey, Verb, register_method


def edit_list(edits: Any) -> list:
    """Recipe ``edits``: ``;``-separated text, a list, or a JSON file holding a list → a list (unchecked)."""
    if edits is None:
        return []
    if isinstance(edits, (list, tuple)):
        return list(edits)
    p = Path(str(edits))
    if not p.exists() and not p.is_symlink():
        if str(edits).endswith(".json"):
            raise GeosteerError(f"edits file not found: {p} (a JSON list of surface edits)")
        return [e.strip() for e in str(edits).split(";") if e.strip()]
    from geosteer.config_schema import parse_config_text
    from geosteer.readers import ReadRefused, read_text

    try:
        text = read_text(p, what="edits file")
    except ReadRefused as e:
        raise GeosteerError(str(e)) from None
    doc = parse_config_text(text, f"edits file {p}")  # valid JSON, bounded nesting
    doc = doc.get("edits", doc) if isinstance(doc, dict) else doc
    if not isinstance(doc, list):
        raise GeosteerError(f"edits file {p} must hold a JSON list of edits")
    return doc


def _validate(v: dict) -> None:
    if v["edits"] is not None and v["surfaces"] is None:
        raise GeosteerError("edits= needs surfaces= (the edits change a surfaces artifact)")
    if v["surfaces"] is None and float(v["surfaces_strength"]) != 1.0:
        raise GeosteerError("surfaces_strength= needs surfaces= (a surfaces artifact folder)")


def at_strength(bank, s: float):
    """``bank`` with every coefficient × ``s`` (in place; returned): the correction S → s·S, so the gain
    1 + S becomes 1 + s·S (0: the stock model, 1: the bank as it is). Exact walls are on or off, so surfaces
    carrying them take only 0 (walls off) or 1; non-finite products are refused."""
    s = float(s)
    if s == 1.0:
        return bank
    if bank.walls and s != 0.0:
        raise GeosteerError(f"surfaces_strength={s:g}: these surfaces carry {len(bank.walls)} exact wall(s), which "
                            f"are on or off; give 0 or 1, or scale the surfaces alone with edits=\"scale={s:g}\"")
    if bank.walls:
        bank.set_walls([])  # s = 0: walls off too (the stock model)
    with torch.no_grad():
        bank.coefficients.mul_(s)
    check_surfaces(bank.coefficients, bank.lo, bank.hi, bank.layers, source=f"surfaces_strength={s:g}")
    bank.history = [*bank.history, {"edit": f"strength={s:g} (all surfaces)"}]
    return bank


def _build(model, v: dict, *, force: bool = False) -> list:
    """The surfaces (edited if ``edits`` is given) at ``surfaces_strength`` (0: nothing attached); ``force``:
    also when recorded for another base model."""
    if v["surfaces"] is None or float(v["surfaces_strength"]) == 0:
        return []
    from geosteer.manifold.artifact import load
    from geosteer.manifold.edit import Edit, apply_edits

    bank = load(v["surfaces"], model=model, force=force)
    edits = edit_list(v["edits"])
    if edits:
        try:
            apply_edits(bank, [Edit.from_dict(e) if isinstance(e, dict) else e for e in edits])
        except (ValueError, TypeError) as e:
            raise GeosteerError(f"bad surface edit in edits={v['edits']!r}: {e}") from None
    return [at_strength(bank, v["surfaces_strength"])]


def _examples(model, folder) -> dict:
    """For the contract suite: zero surfaces (the stock model) and random ones, saved under ``folder``."""
    from geosteer.manifold.artifact import save
    from geosteer.manifold.bank import install, uninstall

    bank = install(model, grid_size=4)
    uninstall(model)
    neutral = save(bank, folder / "surfaces-neutral")
    with torch.no_grad():
        bank.coefficients.copy_(torch.randn(bank.coefficients.shape, generator=torch.Generator().manual_seed(0)) * 0.5)
    return {"neutral": {"surfaces": str(neutral)}, "active": {"surfaces": str(save(bank, folder / "surfaces"))}}


_CLI_LEARN = "geosteer.manifold.cli_learn"
METHOD = register_method(Method(
    name="manifold",
    summary="attention manifolds: learned B-spline value-modulation surfaces",
    keys=(
        RecipeKey("surfaces", None, "surfaces artifact folder", kind="folder"),
        RecipeKey("edits", None, "edits of those surfaces (text form, ';'-separated), a list, or a JSON file",
                  inline=lambda e: edit_list(e) or None),
        RecipeKey("surfaces_strength", 1.0, "strength s of the (edited) surfaces, coefficients × s (0: the stock "
                  "model, 1: as trained); surfaces with exact walls take 0 or 1", kind="number"),
    ),
    build=_build,
    examples=_examples,
    validate=_validate,
    cli="geosteer.manifold.cli",
    learners=(Verb("surfaces", f"{_CLI_LEARN}:surfaces_cmd"), Verb("walls", f"{_CLI_LEARN}:walls_cmd"),
              Verb("steering-surfaces", f"{_CLI_LEARN}:steering_surfaces_cmd")),
    measures=(Verb("explore", "geosteer.manifold.cli_measure:explore_cmd"),),
    artifacts=(SURFACES,),
))
