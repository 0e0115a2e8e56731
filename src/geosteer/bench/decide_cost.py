"""The CPU-hour estimate of a bench decide design, from the per-lever costs the committed run recorded (on SmolLM2;
another steered model scales them by its cost factor, :func:`scaled`).

The committed run (``docs/results/decide/results.json``, ``costs``: median CPU-seconds per (concept, seed) on 2
CPU cores, one torch thread per worker) trained every learned lever 8 full-batch steps on 8 + 8 texts and read
it at 2 KL levels. A new design's cost per lever and (concept, seed) is estimated as

    train × (steps × batch) / (8 × 8) × (1 + KL checks) + (rest / 2) × levels

(the training part scaled by the texts it reads, the bisection and readings by the levels; prompting and walls
have one setting, so their rest does not scale), plus each (concept, seed)'s context. The committed run read 16
test prompts; a design of P test prompts scales the readings of them by P / 16, a reading at one setting costing
what prompting's whole unit cost (10.9 CPU-s: prompting trains nothing and reads once), so a lever's rest is

    reading × readings × P / 16 + (rest - reading × committed readings) × levels / 2

(readings: the levels, one for prompting and walls; their rest as measured) and the context grows by one reading
× (P - 16) / 16 (its stock readings of the test prompts); at 16 prompts this is the estimate above. The dev
concepts draw 16 prompts whatever the design. Walls have no training rule:
they learn for the design's ``steps`` on all of its ``train_texts`` away texts at once, so their training is

    fixed + per × steps × train_texts

through the two designs measured on SmolLM2: the committed run (8 steps × 8 texts, 48.7 CPU-s) and the trimmed run
(32 steps × 32 texts, 362.6 CPU-s: the median of its first three suppressed units at seed 0, 310.5 to 379.0).

The test phase is read at the design's step cap (an upper bound: the run's cap, set on the dev concepts, is at
most that); the dev phase trains every learned lever at every rate of its grid
(:meth:`~geosteer.bench.design.Design.grid`) on each dev concept and reads one level. A grid is extended past
an edge choice (at most :data:`~geosteer.bench.train_rule.MAX_EXTEND` rates a side, one lever's dev cost on each
dev concept per rate): ``dev_extended_cpu_hours`` is the dev phase with every learned lever's grid extended that
far on one side.
"""

from __future__ import annotations

from collections.abc import Sequence

# from docs/results/decide/results.json: lever -> (CPU-s per concept and seed, of which training), medians
COMMITTED = {"surfaces-rank1": (127.45, 87.2), "walls": (61.1, 48.7), "lora": (91.95, 63.2),
             "loreft": (99.85, 69.4), "vector": (75.85, 46.85), "caa": (31.05, 1.4), "prompting": (10.9, 0.0)}
COMMITTED_CONTEXT = 13.8  # CPU-s per (concept, seed): judge, admission, stock readings (median)
COMMITTED_STEPS, COMMITTED_TEXTS, COMMITTED_LEVELS, COMMITTED_PROMPTS = 8, 8, 2, 16
READING = COMMITTED["prompting"][0]  # CPU-s of one reading of the 16 test prompts at one setting
ONE_SETTING = ("prompting", "walls")  # measured at their own KL: their readings do not scale with the levels
CHECK_SHARE = 0.3  # an s = 1 control-KL check costs about this share of a training step
# walls' training CPU-s measured at a second design (steps, train_texts, median training CPU-s): the trimmed SmolLM2
# run's walls units no-arts, no-geography, no-health at seed 0 (362.6, 379.0, 310.5 of 375.4, 391.5, 321.5 in all)
WALLS_MEASURED = (32, 32, 362.6)
WALLS_PER = (WALLS_MEASURED[2] - COMMITTED["walls"][1]) / (WALLS_MEASURED[0] * WALLS_MEASURED[1]
                                                           - COMMITTED_STEPS * COMMITTED_TEXTS)
WALLS_FIXED = COMMITTED["walls"][1] - WALLS_PER * COMMITTED_STEPS * COMMITTED_TEXTS


def lever_seconds(lever: str, design, steps: int, levels: int, learned: Sequence[str],
                  prompts: int = COMMITTED_PROMPTS) -> float:
    """Estimated CPU-seconds of one lever on one (concept, seed) read on ``prompts`` test prompts (module
    docstring)."""
    total, train = COMMITTED.get(lever, COMMITTED["surfaces-rank1"])  # an exploratory form: like the surfaces
    rest = total - train
    if lever in learned:
        scale = steps * design.batch_texts / (COMMITTED_STEPS * COMMITTED_TEXTS)
        train *= scale * (1 + CHECK_SHARE / max(1, design.kl_every))
    elif lever == "walls":
        train = WALLS_FIXED + WALLS_PER * steps * design.train_texts
    if lever in ONE_SETTING:
        return train + READING * prompts / COMMITTED_PROMPTS + (rest - READING)
    return train + READING * levels * prompts / COMMITTED_PROMPTS + (rest - READING * COMMITTED_LEVELS) * (
        levels / COMMITTED_LEVELS)


def estimate(design, concepts: int, suppressed: int, levers: Sequence[str], learned: Sequence[str],
             dev_concepts: int, workers: int = 2) -> dict:
    """CPU-hours of the dev phase and the test phase (levels x levers x concepts x seeds), their sum, and the
    wall-clock hours on ``workers`` cores; walls run on the ``suppressed`` concepts only."""
    from geosteer.bench.train_rule import MAX_EXTEND

    seeds, levels, prompts = len(design.seeds), len(design.kl_levels), design.test_prompts
    per_lever = {lv: lever_seconds(lv, design, design.steps, levels, learned, prompts) for lv in levers}
    context = COMMITTED_CONTEXT + READING * (prompts - COMMITTED_PROMPTS) / COMMITTED_PROMPTS
    test = seeds * (concepts * context + sum(
        s * (suppressed if lv == "walls" else concepts) for lv, s in per_lever.items()))
    dev_rate = {lv: dev_concepts * lever_seconds(lv, design, design.steps, 1, learned) for lv in learned}
    dev = dev_concepts * COMMITTED_CONTEXT + sum(len(design.grid(lv)) * s for lv, s in dev_rate.items())
    extended = dev + MAX_EXTEND * sum(dev_rate.values())
    hours = {"dev": dev / 3600, "test": test / 3600}
    return {"cpu_hours": round(hours["dev"] + hours["test"], 2), "dev_cpu_hours": round(hours["dev"], 2),
            "test_cpu_hours": round(hours["test"], 2), "dev_extended_cpu_hours": round(extended / 3600, 2),
            "wall_hours": round((dev + test) / 3600 / max(1, workers), 2),
            "workers": workers, "per_lever_cpu_seconds": {k: round(v, 1) for k, v in per_lever.items()},
            "basis": "docs/results/decide/results.json costs; the test phase at the design's step cap (at most)"}


def scaled(cost: dict, model: str) -> dict:
    """``cost`` (:func:`estimate`, SmolLM2's) for the steered ``model``: every CPU-second times the model's cost
    factor (:func:`geosteer.bench.decide_models.cost_factor`), which the estimate then records with its basis."""
    from geosteer.bench.decide_models import cost_factor

    factor, basis = cost_factor(model)
    out = dict(cost)
    for key in ("cpu_hours", "dev_cpu_hours", "test_cpu_hours", "dev_extended_cpu_hours", "wall_hours"):
        out[key] = round(cost[key] * factor, 2)
    out["per_lever_cpu_seconds"] = {k: round(v * factor, 1) for k, v in cost["per_lever_cpu_seconds"].items()}
    out.update(model=model, model_factor=factor, model_factor_basis=basis)
    return out
