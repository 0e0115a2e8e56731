"""The benchmark's outputs: the results JSON, a summary table (mean over concepts per lever), and one
figure per concept (score against control KL on the validation prompts, one curve per lever; plotly, the
``viz`` extra)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from geosteer.io_utils import atomic_write_text


def write_results(doc: dict, out: Path) -> Path:
    path = out / "results.json"
    atomic_write_text(path, json.dumps(doc, indent=1) + "\n")
    return path


def _mean(xs: list[float]) -> float:
    xs = [x for x in xs if x == x]
    return sum(xs) / len(xs) if xs else math.nan


def summary_table(rows: list[dict]) -> list[dict]:
    """Per lever (in order of first appearance): mean over concepts of the test score, concept score,
    fluency score and control KL at each concept's operating point; trainable parameters (mean); ``wins``:
    the concepts where it has the best test score and beats the stock model."""
    order = list(dict.fromkeys(r["lever"] for r in rows))
    out = []
    for lever in order:
        rs = [r for r in rows if r["lever"] == lever]
        out.append({"lever": lever, "concepts": len(rs),
                    "score": _mean([r["score"]["mean"] for r in rs]),
                    "concept_score": _mean([r["concept_score"]["mean"] for r in rs]),
                    "fluency_score": _mean([r["fluency"]["score"]["mean"] for r in rs]),
                    "repeated_4gram_share": _mean([r["fluency"]["repeated_4gram_share"]["mean"] for r in rs]),
                    "control_kl": _mean([r["control_kl"]["mean"] for r in rs]),
                    "params": _mean([float(r["params"]) for r in rs]),
                    "wins": 0})
    by_concept: dict = {}
    for r in rows:
        by_concept.setdefault(r["concept"], []).append(r)
    for rs in by_concept.values():  # the best lever of a concept, when it beats the stock model
        stock = next((r["score"]["mean"] for r in rs if r["lever"] == "stock"), -1.0)
        best = max((r for r in rs if r["lever"] != "stock"), key=lambda r: r["score"]["mean"], default=None)
        if best is not None and best["score"]["mean"] > stock:
            next(o for o in out if o["lever"] == best["lever"])["wins"] += 1
    return sorted(out, key=lambda o: -o["score"] if o["score"] == o["score"] else 0.0)


def paired_difference(rows: list[dict], a: str, b: str, n_boot: int = 2000, seed: int = 0) -> dict:
    """Lever ``a`` against ``b`` on the concepts both measured: the mean of the per-concept test-score
    difference a − b with its 95 % percentile bootstrap interval over concepts, and a's wins, losses, ties."""
    from geosteer.bench.scoring import bootstrap

    score = {(r["concept"], r["lever"]): r["score"]["mean"] for r in rows}
    concepts = [c for c in dict.fromkeys(r["concept"] for r in rows) if (c, a) in score and (c, b) in score]
    diff = [score[(c, a)] - score[(c, b)] for c in concepts]
    return {"a": a, "b": b, "concepts": len(concepts), "difference": bootstrap(diff, n_boot, seed),
            "wins": [c for c, d in zip(concepts, diff, strict=True) if d > 0],
            "losses": [c for c, d in zip(concepts, diff, strict=True) if d < 0],
            "ties": [c for c, d in zip(concepts, diff, strict=True) if d == 0]}


def markdown_table(rows: list[dict]) -> str:
    """The summary table as markdown."""
    lines = ["| lever | concepts | score | concept score | fluency score | repeated 4-grams | control KL | "
             "trainable params | best on |", "|---|---|---|---|---|---|---|---|---|"]
    for o in summary_table(rows):
        lines.append(f"| {o['lever']} | {o['concepts']} | {o['score']:.3f} | {o['concept_score']:.3f} | "
                     f"{o['fluency_score']:.3f} | {o['repeated_4gram_share']:.3f} | {o['control_kl']:.3f} | "
                     f"{o['params']:.0f} | {o['wins']} |")
    return "\n".join(lines)


def pivot_table(rows: list[dict]) -> str:
    """Test score per concept (rows) and lever (columns), markdown; the best lever of a concept in bold."""
    levers = list(dict.fromkeys(r["lever"] for r in rows))
    concepts = list(dict.fromkeys(r["concept"] for r in rows))
    cell = {(r["concept"], r["lever"]): r["score"]["mean"] for r in rows}
    lines = ["| concept | " + " | ".join(levers) + " |", "|---" * (len(levers) + 1) + "|"]
    for c in concepts:
        best = max((v for (cc, lv), v in cell.items() if cc == c and lv != "stock"), default=None)
        if best is not None and best <= cell.get((c, "stock"), -1.0):
            best = None  # no lever beats the stock model
        vals = [cell.get((c, lv)) for lv in levers]
        lines.append(f"| {c} | " + " | ".join(
            "–" if v is None else (f"**{v:.3f}**" if v == best and lv != "stock" else f"{v:.3f}")
            for v, lv in zip(vals, levers, strict=True)) + " |")
    return "\n".join(lines)


def concept_table(rows: list[dict]) -> str:
    """Every row (concept × lever) with its 95 % intervals, as markdown."""
    def ci(d: dict) -> str:
        return f"{d['mean']:.3f} ({d['lo']:.3f} … {d['hi']:.3f})"

    lines = ["| concept | lever | operating point | score (95 % CI) | concept score | fluency score | control KL |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['concept']} | {r['lever']} | {r['operating_point']['label']} | {ci(r['score'])} | "
                     f"{ci(r['concept_score'])} | {ci(r['fluency']['score'])} | {ci(r['control_kl'])} |")
    return "\n".join(lines)


def write_figures(doc: dict, out: Path) -> list[Path]:
    """One HTML figure per concept under ``out/figures`` (needs plotly: the viz extra)."""
    from geosteer.extras import require

    go = require("plotly.graph_objects")
    paths = []
    for concept in dict.fromkeys(c["concept"] for c in doc["curves"]):
        fig = go.Figure()
        curves = [c for c in doc["curves"] if c["concept"] == concept]
        for lever in dict.fromkeys(c["lever"] for c in curves):
            pts = sorted((c for c in curves if c["lever"] == lever), key=lambda c: c["control_kl"]["mean"])
            fig.add_trace(go.Scatter(x=[p["control_kl"]["mean"] for p in pts], y=[p["score"]["mean"] for p in pts],
                                     mode="lines+markers", name=lever,
                                     text=[f"s={p['strength']:g} {p['params']}" for p in pts]))
        kl = doc["meta"].get("kl_budget")
        if kl is not None:
            fig.add_vline(x=kl, line_dash="dot", annotation_text="KL budget")
        fig.update_layout(title=f"{concept}: score vs control KL (validation prompts; reference: stock model)",
                          xaxis_title="control next-token KL (nats)", yaxis_title="score (harmonic mean)",
                          template="plotly_white")
        path = out / "figures" / f"{concept}.html"
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.write_html(str(path), include_plotlyjs="cdn")
        paths.append(path)
    return paths
