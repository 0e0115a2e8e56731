"""The prompting lever's instruction (:func:`geosteer.bench.matched.build_prompting` builds the lever)."""

from __future__ import annotations


def instruction_for(concept) -> str:
    """The prompting lever's instruction for ``concept``."""
    from geosteer.bench.concepts import describe

    what = describe(concept)
    if concept.direction == "promote":
        return f"Whatever you are asked, make your answer about {what}."
    return f"Whatever you are asked, do not mention {what} in your answer."
