"""The dry run of ``geosteer bench decide``: a design's predicted minimum detectable effect (of its unit: the
concept, or the test prompt) and its CPU-hour estimate, computed without loading a model."""

from __future__ import annotations

from geosteer.bench.decide_models import DEFAULT_MODEL as MODEL


def dry_run(design, n_concepts: int, suppressed: int = 0, workers: int = 2, explore: tuple[str, ...] = (),
            model: str = MODEL, by_request: bool = False, prompt_pool: int | None = None) -> dict:
    """The design, its predicted minimum detectable effect (from the design's prior variance components, of its
    unit: :func:`_predicted`) and its CPU-hour estimate (:mod:`geosteer.bench.decide_cost`, scaled by the steered
    model's cost factor, :func:`geosteer.bench.decide_models.cost_factor`; ``suppressed``: the concepts walls run
    on; ``by_request``: a concept file grouped by request is run; ``prompt_pool``: the smallest pool of test
    prompts among the concepts, default the prompts a seed draws)."""
    from geosteer.bench.decide_concepts import pool_record
    from geosteer.bench.decide_cost import estimate, scaled
    from geosteer.bench.decide_draw import record
    from geosteer.bench.decide_run import LEVERS
    from geosteer.bench.matched import LEARNED

    unit, m, mde = _predicted(design, n_concepts, prompt_pool)
    cost = estimate(design, n_concepts, suppressed, (*LEVERS, *explore), (*LEARNED, *explore),
                    len(design.dev_concepts()), workers)
    cost = scaled(cost, model)
    return {"design": design.to_dict(), "model": model, "concepts": n_concepts, "comparisons": m, **unit,
            "minimum_detectable_effect": mde, "power": power_note(mde, n_concepts, unit["unit"]), "cost": cost,
            "draws": record(pool_record(design.test_prompts), by_request)}


def _predicted(design, n_concepts: int, prompt_pool: int | None) -> tuple[dict, int, float]:
    """({"unit"} and, for the prompt, the distinct prompts per concept and the readings of each; the Holm family's
    size; the predicted MDE): concept-level t from the design's ``prior_sd_concept`` and ``prior_sd_item``, or
    prompt-level t from its prompt-level priors (:func:`geosteer.bench.endpoints_prompt.predicted_mde`)."""
    from geosteer.bench.decide_report import n_comparisons, pairs
    from geosteer.bench.design import ALPHA
    from geosteer.bench.stats import minimum_detectable_effect

    m = n_comparisons()
    if design.unit != "prompt":
        return {"unit": "concept"}, m, minimum_detectable_effect(
            n_concepts, design.test_prompts, len(design.seeds), design.prior_sd_concept, design.prior_sd_item, m,
            ALPHA, 0.8)
    from geosteer.bench.endpoints_prompt import expected_prompts, predicted_mde

    drawn, seeds = design.test_prompts, len(design.seeds)
    n_p = expected_prompts(prompt_pool or drawn, drawn, seeds)
    per = drawn * seeds / n_p
    return ({"unit": "prompt", "prompts_per_concept": n_p, "readings_per_prompt": per}, n_concepts * m,
            predicted_mde(design, n_concepts, len(pairs()), n_p, per, ALPHA, 0.8))


def power_note(mde: float, n_concepts: int, unit: str = "concept") -> str | None:
    """What a predicted MDE means when it is too large to detect a plausible effect (None otherwise): above 1,
    no difference of concept scores (in [0, 1]) reaches it; above :data:`geosteer.bench.design.LARGEST_MEASURED_GAIN`,
    only a difference larger than any the committed run measured would (``unit``: the design's, what gives power)."""
    from geosteer.bench.design import LARGEST_MEASURED_GAIN

    more = "more test prompts per concept give" if unit == "prompt" else "more concepts give"
    if mde >= 1:
        return (f"the predicted minimum detectable effect {mde:.3f} is above 1, the largest possible difference of "
                f"concept scores: with {n_concepts} concepts the verdict cannot detect any concept-score effect; the "
                "run describes each lever on these concepts, and only more concepts give it power")
    if mde > LARGEST_MEASURED_GAIN:
        return (f"the predicted minimum detectable effect {mde:.3f} is above {LARGEST_MEASURED_GAIN:g}, the largest "
                "concept-score difference between two levers the committed SmolLM2 run measured: only a larger "
                f"effect than any measured there would be detected; {more} the verdict power")
    return None


def count(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1 ("1 concept", "2 concepts")."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
