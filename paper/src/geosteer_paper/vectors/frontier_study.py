"""The frontier study's run: the bundled behaviours, the plan of levers and strengths, per-point caching.

:func:`run_frontier` measures every point of the plan for each behaviour and returns tidy records (one per
point, fields :data:`frontier.RECORD_FIELDS` + ``extra``); each point's record is written to
``cache/points/<behaviour>/<point>.json`` as soon as it is measured, and training runs go to
``cache/runs/``, so a killed run resumes where it stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import geosteer.data
from geosteer.eval.perplexity import heldout_ids
from geosteer.io_utils import atomic_write_json
from geosteer.manifold.wall_learn import read_controls, read_targets
from geosteer_paper.vectors.frontier import Behaviour, compare, encode_heldout, matched_kl, raw_outputs
from geosteer_paper.vectors.frontier_levers import (
    Point,
    caa_points,
    directional_settings,
    edit_points,
    ffn_settings,
    recipe_points,
    scales_points,
    trained_points,
)

SENTIMENT_DIR = Path(__file__).resolve().parents[3] / "studies" / "manifold" / "steer_learn"  # a source checkout
WALL_LEARN_DIR = Path(geosteer.data.__file__).resolve().parent / "prompts" / "wall_learn"  # shipped prompts
LEVERS = ("CAA", "learned steering surfaces", "learned walls", "surfaces edits", "directional",
          "learned scales", "FFN edits")


def bundled_behaviour(name: str) -> Behaviour:
    """``sentiment`` (promote " wonderful" over " terrible" after neutral openings) or a bundled
    learned-walls category (``elements``, ``mischief``: suppress its target continuations); the category's
    controls."""

    wl = WALL_LEARN_DIR
    if name == "sentiment":
        s = SENTIMENT_DIR
        return Behaviour(name, +1, read_targets(s / "sentiment_target_train.json"),
                         read_targets(s / "sentiment_target_heldout.json"),
                         read_controls(wl / "elements_control_train.json"),
                         read_controls(wl / "elements_control_heldout.json"),
                         read_targets(s / "sentiment_negative_train.json"),
                         read_targets(s / "sentiment_negative_heldout.json"),
                         description='promote " wonderful" (negative: " terrible") after neutral openings')
    if not (wl / f"{name}_target_train.json").is_file():
        cats = sorted(p.name.split("_")[0] for p in wl.glob("*_target_train.json"))
        raise ValueError(f"unknown behaviour '{name}'; valid: sentiment, {', '.join(cats)}")
    return Behaviour(name, -1, read_targets(wl / f"{name}_target_train.json"),
                     read_targets(wl / f"{name}_target_heldout.json"),
                     read_controls(wl / f"{name}_control_train.json"),
                     read_controls(wl / f"{name}_control_heldout.json"),
                     description=f"suppress the {name} wall-learn targets")


@dataclass
class Plan:
    """Which levers at which strengths (see :mod:`frontier_levers`)."""

    levers: Sequence[str] = LEVERS
    caa_layers: Sequence[int] = (5, 15, 25)
    caa_multipliers: Sequence[float] = (0.125, 0.25, 0.5, 1)
    lever_layer: int | None = None  # directional / FFN layer (None: the middle CAA layer)
    steer_taus: Sequence[float] = (0.02, 0.1)
    steer_steps: int = 10
    steer_lr: float = 0.02
    wall_taus: Sequence[float] = (0.02,)
    wall_steps: int = 20
    wall_lr: float = 0.1
    scale_taus: Sequence[float] = (0.02,)
    scale_steps: int = 10
    scale_lr: float = 0.02
    edit_top: int = 16
    edit_strengths: Sequence[float] = (0.5, 1, 2)
    dir_par: Sequence[float] = (0.5, 1.5)
    dir_perp: Sequence[float] = ()
    ffn_gains: Sequence[float] = (0.5, 1.5)
    reuse: dict = field(default_factory=dict)  # "behaviour:mode:tau" -> artifact folder
    cached_only: bool = False  # assemble from the cache: a point not measured yet is left out (logged)
    ppl_tokens: int = 1024
    ppl_context: int = 512
    seed: int = 0

    def __post_init__(self) -> None:
        bad = [x for x in self.levers if x not in LEVERS]
        if bad:
            raise ValueError(f"unknown lever '{bad[0]}'; valid: {', '.join(LEVERS)}")

    def reused(self, behaviour: str, mode: str) -> dict:
        out = {}
        for key, folder in self.reuse.items():
            b, m, tau = key.split(":")
            if b == behaviour and m == mode:
                out[float(tau)] = folder
        return out


def _points(model, tok, b: Behaviour, reference: list, surfaces: str | None, plan: Plan, runs: Path,
            log) -> list[Point]:
    pts: list[Point] = [Point("reference", "neutral", 0.0, _const(reference))]
    if surfaces is not None:
        pts.append(Point("stock model", "no surfaces", 0.0, _const([])))
    mid = plan.lever_layer if plan.lever_layer is not None else list(plan.caa_layers)[len(plan.caa_layers) // 2]
    if "CAA" in plan.levers:
        pts += caa_points(model, tok, b, reference, plan.caa_layers, plan.caa_multipliers)
    if surfaces is not None and "learned steering surfaces" in plan.levers:
        pts += trained_points(model, tok, b, surfaces, runs, "dense", plan.steer_taus, plan.steer_steps,
                              plan.steer_lr, plan.reused(b.name, "dense"), log)
    if surfaces is not None and "surfaces edits" in plan.levers:
        pts += edit_points(model, tok, b, reference[0], plan.edit_top, plan.edit_strengths)
    if "directional" in plan.levers:
        pts += recipe_points(model, reference, "directional ∥/⊥",
                             directional_settings(mid, plan.dir_par, plan.dir_perp), layer=mid)
    if "learned scales" in plan.levers and b.direction > 0:  # the objective only promotes
        pts += scales_points(model, tok, b, reference, runs, plan.scale_taus, plan.scale_steps, plan.scale_lr, log)
    if "FFN edits" in plan.levers:
        pts += recipe_points(model, reference, "FFN edits", ffn_settings(mid, plan.ffn_gains), layer=mid)
    if surfaces is not None and "learned walls" in plan.levers and (b.direction < 0 or b.negatives_train):
        pts += trained_points(model, tok, b, surfaces, runs, "walls", plan.wall_taus, plan.wall_steps,
                              plan.wall_lr, plan.reused(b.name, "walls"), log)
    return pts


def _const(ivs: list) -> Callable:
    import contextlib

    @contextlib.contextmanager
    def ctx():
        yield list(ivs)
    return ctx


def _cached_point(path: Path) -> dict:
    """A cached point's record, read by the bounded reader; anything else than a record is one line."""
    from geosteer.errors import GeosteerError
    from geosteer.io_utils import read_json

    doc = read_json(path, "cached point")
    if not isinstance(doc, dict) or not {"behaviour", "lever", "setting"} <= set(doc):
        raise GeosteerError(f"cached point {path} is not a point's record; delete it to measure it again")
    return doc


def run_behaviour(model, tok, b: Behaviour, reference: list, surfaces: str | None, plan: Plan, cache: Path,
                  ppl_ids, log: Callable[[str], None] = print) -> list[dict]:
    """Every point of ``plan`` for one behaviour (cached per point under ``cache``)."""
    data = encode_heldout(tok, b, ppl_ids, plan.ppl_context)
    ref = raw_outputs(model, data, reference)
    folder = cache / "points" / b.name
    folder.mkdir(parents=True, exist_ok=True)
    records = []
    for p in _points(model, tok, b, reference, surfaces, plan, cache / "runs", log):
        path = folder / f"{p.key}.json"
        if path.exists() or path.is_symlink():
            records.append(_cached_point(path))
            continue
        if plan.cached_only:
            log(f"{b.name} | {p.lever} | {p.setting}: not in the cache, left out")
            continue
        t0 = time.perf_counter()
        with p.context() as ivs:
            out = raw_outputs(model, data, ivs)
        rec = {"behaviour": b.name, "lever": p.lever, "setting": p.setting, "strength": p.strength,
               "layer": p.layer, **compare(ref, out, data, b.direction, plan.seed), "extra": p.extra,
               "seconds": round(time.perf_counter() - t0, 1)}
        atomic_write_json(path, rec)
        records.append(rec)
        log(f"{b.name} | {p.lever} | {p.setting}: shift {rec['target_shift']:+.3f} "
            f"[{rec['target_shift_lo']:+.3f}, {rec['target_shift_hi']:+.3f}] KL {rec['control_kl']:.4f} "
            f"ppl x{rec['ppl_ratio']:.4f} ({rec['seconds']} s)")
    return records


def run_frontier(model, tok, behaviours: Sequence[Behaviour], plan: Plan, cache: str | Path, *,
                 surfaces: str | None = None, log: Callable[[str], None] = print) -> dict:
    """The study: ``{"records", "matched_kl", "plan"}`` (``surfaces``: the reference surfaces' folder;
    None: the stock model is the reference and the surfaces levers are left out)."""

    cache, log = Path(cache), log or (lambda s: None)
    reference = []
    if surfaces is not None:
        from geosteer.manifold import load

        reference = [load(surfaces, model=model)]
    ppl_ids = heldout_ids(tok, plan.ppl_tokens)
    records, matched = [], []
    for b in behaviours:
        rows = run_behaviour(model, tok, b, reference, surfaces, plan, cache, ppl_ids, log)
        records += rows
        matched += matched_kl(rows, "learned steering surfaces")
    return {"records": records, "matched_kl": matched,
            "plan": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(plan).items()},
            "behaviours": [{"name": b.name, "direction": b.direction, "description": b.description,
                            "n_train": len(b.train), "n_heldout": len(b.heldout),
                            "n_controls_heldout": len(b.controls_heldout)} for b in behaviours]}
