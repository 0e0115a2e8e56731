"""The two levers that train nothing: prompting and CAA (registered on import)."""

from __future__ import annotations

from geosteer.bench.registry import Lever, Point, Prepared, Setup, fixed, no_interventions, register_lever


# ------------------------------------------------------------------------------------------ prompting
def instruction_for(concept) -> str:
    """The prompting lever's instruction for ``concept``."""
    from geosteer.bench.concepts import describe

    what = describe(concept)
    if concept.direction == "promote":
        return f"Whatever you are asked, make your answer about {what}."
    return f"Whatever you are asked, do not mention {what} in your answer."


def build_prompting(s: Setup) -> Prepared:
    """Strength 1: the instruction as the system prompt (chat) or a line before the prompt (plain text)."""
    text = instruction_for(s.concept)
    return Prepared([Point("prompting", 1.0, {"instruction": text}, no_interventions, instruction=text)], 0)


# ------------------------------------------------------------------------------------------------ CAA
def caa_layers(n_layers: int, fractions) -> list[int]:
    return sorted({min(n_layers - 1, max(0, round(f * (n_layers - 1)))) for f in fractions})


def build_caa(s: Setup) -> Prepared:
    """Mean difference of the residual stream (``resid_post``, mean over each text's tokens) between the
    toward and away texts (``geosteer.vectors.extract``), added × multiplier at every position of one layer;
    layer and multiplier are candidates of the operating-point rule."""
    from geosteer.bench.prompts import training_texts
    from geosteer.models.anatomy import anatomy
    from geosteer.vectors import extract

    layers = caa_layers(anatomy(s.model).n_layers, s.budget.caa_layers)
    pos, neg = training_texts(s, s.toward), training_texts(s, s.away)
    sv = extract(s.model, s.tok, positive=pos, negative=neg, layers=layers, point="resid_post",
                 method="mean_diff", positions="all")
    norms = sv.norms()
    points = [Point("caa", float(m), {"layer": layer, "multiplier": float(m)},
                    fixed([sv.with_(scale=float(m), layers=[layer])]))
              for layer in layers for m in s.budget.caa_multipliers]
    return Prepared(points, 0, {"vector_norms": {str(k): round(v, 4) for k, v in norms.items()}})


register_lever(Lever("prompting", build_prompting, "an instruction (system prompt through the chat template)"))
register_lever(Lever("caa", build_caa, "mean-difference vector; layer and multiplier chosen on validation"))
