"""The frontier of the decisive benchmark: each lever's concept gain over stock against control KL, and its figure.

At every control-KL level of the design, each lever's concept gain over the stock model is the endpoint
module's paired difference of the concept score per (concept, seed, prompt), averaged per concept, with a
concept-level t interval at 95 % (:func:`geosteer.bench.tdist.concept_t`; descriptive: the decision rule reads
its own two levels, Holm-adjusted, :mod:`geosteer.bench.endpoints`). Beside it: the lever's mean achieved
control KL at that level (prompting and walls have one setting: their own KL at every level) and how many of
its matched strengths lie outside [0.5, 2]. :func:`write_figure` draws it from ``results.json``: one line per
lever with its interval bars, one plot per model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from geosteer.bench.endpoints import CONCEPT
from geosteer.bench.stats import paired_differences
from geosteer.bench.tdist import concept_t

FIGURE = "frontier.html"


def _mean(xs) -> float | None:
    xs = [float(x) for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return float(np.mean(xs)) if xs else None


def frontier(recs: Sequence[dict], levels: Sequence[str], levers: Sequence[str], alpha: float = 0.05) -> list[dict]:
    """One row per (lever, level) with any admitted record: the concept gain over stock (mean, lo, hi,
    n_concepts, n_items), the mean achieved control KL, the matched strengths outside [0.5, 2]."""
    admitted = [r for r in recs if r.get("admitted")]
    out = []
    for lever in levers:
        for lv in levels:
            mine = [r for r in admitted if r["lever"] == lever and str(r["kl_level"]) == str(lv)]
            if not mine:
                continue
            t = concept_t(paired_differences(admitted, lever, "stock", lv, field=CONCEPT.field), alpha)
            units = {(r["concept"], r["seed"]): r for r in mine}.values()  # one strength per (concept, seed)
            flagged = [u for u in units if u.get("strength_in_range") is False]
            out.append({"lever": lever, "kl_level": str(lv), "kl": _mean(u.get("kl") for u in units),
                        "mean": t["mean"], "lo": t["lo"], "hi": t["hi"], "n_concepts": t["n_concepts"],
                        "n_items": t["n_items"], "alpha": alpha, "units": len(units),
                        "strength_outside": len(flagged)})
    return out


def _cell(r: dict | None) -> str:
    if r is None or r["mean"] is None:
        return "–"
    ci = "" if r["lo"] is None else f" [{r['lo']:+.3f}, {r['hi']:+.3f}]"
    flag = f" ({r['strength_outside']}/{r['units']} s∉[0.5,2])" if r["strength_outside"] else ""
    return f"{r['mean']:+.3f}{ci}{flag}"


def frontier_markdown(rows: Sequence[dict], levels: Sequence[str]) -> str:
    """One row per lever, one column per KL level: gain [95 % t interval] and the strengths outside [0.5, 2]."""
    if not rows:
        return ""
    by = {(r["lever"], r["kl_level"]): r for r in rows}
    head = ["lever"] + [f"KL {lv}" for lv in levels]
    lines = ["Concept gain over stock against control KL (95 % concept-level t intervals; descriptive):", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for lever in dict.fromkeys(r["lever"] for r in rows):
        lines.append("| " + " | ".join([lever] + [_cell(by.get((lever, str(lv)))) for lv in levels]) + " |")
    return "\n".join(lines) + "\n"


def figure(doc: dict):
    """The frontier of one results document (one model) as a plotly figure: x the mean achieved control KL,
    y the concept gain over stock, one line per lever with its interval bars."""
    from geosteer.extras import require

    go = require("plotly.graph_objects")
    fig = go.Figure()
    rows = doc.get("frontier") or []
    for lever in dict.fromkeys(r["lever"] for r in rows):
        pts = sorted((r for r in rows if r["lever"] == lever and r["mean"] is not None),
                     key=lambda r: float(r["kl_level"]))
        lo = [r["mean"] - r["lo"] if r["lo"] is not None else 0.0 for r in pts]
        hi = [r["hi"] - r["mean"] if r["hi"] is not None else 0.0 for r in pts]
        fig.add_trace(go.Scatter(x=[r["kl"] for r in pts], y=[r["mean"] for r in pts], mode="lines+markers",
                                 name=lever, error_y={"type": "data", "array": hi, "arrayminus": lo},
                                 text=[f"level {r['kl_level']}, {r['n_concepts']} concepts" for r in pts]))
    fig.add_hline(y=0.0, line_dash="dot")
    fig.update_layout(title=f"{doc.get('model') or 'model'}: concept gain over stock against control KL",
                      xaxis_title="control next-token KL (nats)", xaxis_type="log",
                      yaxis_title="concept gain over stock (P(concept), 95 % t interval)", template="plotly_white")
    return fig


def write_figure(results: Path, out: Path | None = None) -> Path:
    """Draw ``results.json``'s frontier to ``out`` (default: :data:`FIGURE` beside it); the path."""
    from geosteer.readers import read_json

    doc = read_json(Path(results), what="results")
    path = Path(out) if out is not None else Path(results).with_name(FIGURE)
    from geosteer.io_utils import atomic_write_text

    atomic_write_text(path, figure(doc).to_html(include_plotlyjs="cdn"))  # a killed report leaves no half page
    return path
