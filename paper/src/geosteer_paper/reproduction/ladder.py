"""The scale ladder: items whose divergence the report puts down to model size, measured on models of growing
size, each against the paper's band, with a verdict on whether the gap closes with size.

The criteria (``ladder.json`` beside this module) were written before any ladder run: per item the quantity
(a :class:`Query` into each rung's results file, optionally minus a second and over a third), the paper's band,
the rungs and the budget. The rules are :func:`gap` and :func:`verdict`; the report renders them."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from geosteer.readers import parse_json
from geosteer_paper.reproduction.items import Query
from geosteer_paper.reproduction.query import NotReadable, evaluate_query, read_results

RUNGS = ("smollm2", "gemma3-270m", "qwen2.5-0.5b", "qwen2.5-1.5b")  # in order of parameter count
NAMES = {"smollm2": "SmolLM2-135M", "gemma3-270m": "Gemma-3-270m", "qwen2.5-0.5b": "Qwen2.5-0.5B",
         "qwen2.5-1.5b": "Qwen2.5-1.5B"}
FAMILY_STEP = ("qwen2.5-0.5b", "qwen2.5-1.5b")


def family_step(item: LadderItem) -> tuple[str, str]:
    """The same-family step the closes / rises rules read: Qwen 0.5B → 1.5B on the registry ladder; on an item's
    own ladder of from-scratch sizes, its two largest (the budget's "d192 × 8 → d256 × 8")."""
    return FAMILY_STEP if all(m in RUNGS for m in item.models) else (item.models[-2], item.models[-1])


ROOT = "docs/results/ladder"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Band(_Strict):
    kind: Literal["below", "above", "between"]
    threshold: float | None = None
    lo: float | None = None
    hi: float | None = None


class LadderItem(_Strict):
    id: str
    slug: str
    kind: Literal["trend", "inference", "training", "post-training", "from-scratch"]
    what: str
    paper: str
    band: Band
    quantity: Query
    minus: Query | None = None
    over: Query | None = None
    models: list[str]
    budget: str
    command: str
    query_fix: str | None = None  # a defect of the query or command found after commit, and what changed


class Ladder(_Strict):
    about: str
    rules: dict[str, str]
    items: list[LadderItem]


def load_ladder(text: str | None = None) -> Ladder:
    """The shipped criteria (or ``text``)."""
    if text is None:
        text = (resources.files("geosteer_paper.reproduction") / "ladder.json").read_text(encoding="utf-8")
    return Ladder.model_validate(parse_json(text, "ladder.json"))


def gap(band: Band, v: float) -> float:
    """The distance of ``v`` outside the paper's band (0 inside it)."""
    if band.kind == "below":
        return max(0.0, v - band.threshold)
    if band.kind == "above":
        return max(0.0, band.threshold - v)
    return max(0.0, band.lo - v, v - band.hi)


def _spearman(x: list[float], y: list[float]) -> float:
    def ranks(v):
        order = sorted(range(len(v)), key=v.__getitem__)
        r = [0.0] * len(v)
        for i, j in enumerate(order):
            r[j] = float(i)
        return r

    rx, ry = ranks(x), ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    den = math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    return cov / den if den else 0.0


def verdict(item: LadderItem, values: dict[str, float], params: dict[str, float] | None = None) -> tuple[str, str]:
    """(verdict, why) by the rules of ``ladder.json``: reached / closes / opens / no trend / not run, or for a
    trend claim rises / no trend. ``values`` maps rung names to the measured quantity."""
    done = [m for m in item.models if m in values]
    if len(done) < 2 or done[0] != item.models[0]:
        return "not run", f"{len(done)} of {len(item.models)} rungs measured"
    if item.kind == "trend":
        if len(done) < 3:
            return "not run", f"{len(done)} rungs measured (a trend needs three)"
        size = [math.log(params[m]) if params and m in params else float(i) for i, m in enumerate(done)]
        rho = _spearman(size, [values[m] for m in done])
        a, b = family_step(item)
        step = a in values and b in values
        up = values[b] > values[a] if step else True
        why = f"Spearman rho(log parameters, value) {rho:+.2f} over {len(done)} rungs"
        if step:
            label = "Qwen 0.5B → 1.5B" if (a, b) == FAMILY_STEP else f"{a} → {b}"
            why += f"; {label} {values[a]:.3f} → {values[b]:.3f}"
        return ("rises" if rho >= 0.8 and up else "no trend"), why
    gaps = {m: gap(item.band, values[m]) for m in done}
    first, last = gaps[done[0]], gaps[done[-1]]
    why = "gap " + ", ".join(f"{NAMES.get(m, m)} {gaps[m]:.3g}" for m in done)
    if last == 0:
        return "reached", why
    a, b = family_step(item)
    widened = a in gaps and b in gaps and gaps[b] > gaps[a]
    if last <= first / 2 and not widened:
        return "closes", why
    if (first == 0 and last > 0) or last >= 2 * first:
        return "opens", why
    return "no trend", why


@dataclass
class LadderResult:
    item: LadderItem
    values: dict[str, float] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)  # rung -> why it has no value
    verdict: str = "not run"
    why: str = ""


_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def fill_query(q: Query, data) -> Query:
    """``q`` with each ``{name}`` in its ``where`` values filled from the results file's ``meta.<name>`` (a
    per-rung choice the run records, such as the walls criterion's layer); :class:`NotReadable` when the file
    does not record it."""
    if not q.where:
        return q
    meta = data.get("meta") if isinstance(data, dict) else None

    def value(m: re.Match) -> str:
        v = meta.get(m.group(1)) if isinstance(meta, dict) else None
        if v is None or isinstance(v, (dict, list)):
            raise NotReadable(f"the query's {{{m.group(1)}}} is not recorded in the results file's meta")
        return str(v)

    where = {k: _PLACEHOLDER.sub(value, v) if isinstance(v, str) else v for k, v in q.where.items()}
    return q.model_copy(update={"where": where})


def read_value(item: LadderItem, data) -> float:
    """The item's quantity (minus ``minus``, over ``over``) in one rung's parsed results file."""
    v = evaluate_query(data, fill_query(item.quantity, data))
    if item.minus is not None:
        v -= evaluate_query(data, fill_query(item.minus, data))
    if item.over is not None:
        v /= evaluate_query(data, fill_query(item.over, data))
    return v


def _read(item: LadderItem, path: Path) -> float:
    return read_value(item, read_results(path))


def evaluate_ladder(ladder: Ladder, root: Path, params: dict[str, float] | None = None) -> list[LadderResult]:
    """Each item's value on each rung (``<root>/docs/results/ladder/<slug>/<model>.json``) and its verdict."""
    out = []
    base = root / ROOT if (root / ROOT).is_dir() else root / "ladder"  # a repository root or its docs/results
    for it in ladder.items:
        res = LadderResult(it)
        for m in it.models:
            path = base / it.slug / f"{m}.json"
            if not path.is_file():
                res.missing[m] = "not run"
                continue
            try:
                res.values[m] = _read(it, path)
            except NotReadable as e:
                res.missing[m] = str(e)
        res.verdict, res.why = verdict(it, res.values, params)
        out.append(res)
    return out


def _band_text(b: Band) -> str:
    if b.kind == "below":
        return f"< {b.threshold:g}"
    if b.kind == "above":
        return f"> {b.threshold:g}"
    return f"{b.lo:g} … {b.hi:g}"


LADDER_INTRO = (
    "Items whose divergence the report puts down to model size, the token budget or the CPU, measured on "
    "models of growing size with the same corpus, token count, windows and seed. Each item's criterion (the "
    "quantity, the paper's band, the rungs and the budget) was committed before its first ladder run "
    "(`paper/src/geosteer_paper/reproduction/ladder.json`). The gap is a rung's distance outside the paper's "
    "band; it **closes** when the largest rung's gap is at most half of SmolLM2-135M's and the Qwen 0.5B → 1.5B "
    "step (on a ladder of from-scratch sizes, its two largest) does not widen it, **reached** when the largest "
    "rung meets the band, **opens** when the largest "
    "rung's gap is at least twice SmolLM2's; a trend claim **rises** when Spearman ρ(parameters, value) ≥ 0.8 "
    "and Qwen 1.5B > 0.5B. Commands, costs and the figure: [ladder.md](ladder.md).")


def ladder_markdown(results: list[LadderResult]) -> list[str]:
    """The report's ladder section: one row per item, each rung's value, the paper's band, the verdict."""
    head = "| item | quantity | paper | band | " + " | ".join(NAMES[m] for m in RUNGS) + " | verdict |"
    lines = ["## The scale ladder", "", LADDER_INTRO, "", head,
             "|---|---|---|---|" + "---|" * len(RUNGS) + "---|"]
    for r in results:
        cells = []
        for m in RUNGS:
            if m in r.values:
                cells.append(f"{r.values[m]:.4g}")
            else:
                cells.append("not run" if m in r.item.models else "—")
        own = [m for m in r.item.models if m not in RUNGS]  # a ladder of its own (from-scratch sizes)
        if own:
            cells = ["; ".join(f"{m} {r.values[m]:.4g}" if m in r.values else f"{m} not run" for m in own)]
            cells += ["—"] * (len(RUNGS) - 1)
        verdict_text = r.verdict + (f" ({r.why})" if r.why else "")
        row = [f"{r.item.id}", r.item.what, r.item.paper, _band_text(r.item.band), *cells, verdict_text]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |")
    fixed = [r.item for r in results if r.item.query_fix]
    if fixed:
        lines += ["", "Query fixes made after the criteria were committed (no band, threshold or rule changed):", ""]
        lines += [f"- {it.id}: {it.query_fix}" for it in fixed]
    return lines
