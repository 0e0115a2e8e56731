"""Paper 2's scale claim as a ladder figure: the attention-only angular deficit against parameter count, the
ladder's models beside the paper's two stated points (GPT-2 0.41, Llama-3-8B 0.63), drawn from one JSON.

    python paper/studies/ladder/deficit_figure.py --out docs/results/ladder/deficit.json \\
        --svg docs/results/ladder/deficit.svg

Reads docs/results/ladder/deficit/<model>.json (``paper/studies/ladder/run.sh deficit``) and counts each
model's parameters from the header of its dequantised cache (``<cache>/<model>/model.safetensors``: every
stored tensor once, so a tied embedding counts once, as in the paper's 124M for GPT-2).
"""

from __future__ import annotations

import argparse
import json
import math
import struct
from pathlib import Path

from geosteer.cache import cache_dir
from geosteer.io_utils import atomic_write_text

RUNGS = ("smollm2", "gemma3-270m", "qwen2.5-0.5b", "qwen2.5-1.5b")
LABELS = {"smollm2": "SmolLM2-135M", "gemma3-270m": "Gemma-3-270m", "qwen2.5-0.5b": "Qwen2.5-Coder-0.5B",
          "qwen2.5-1.5b": "Qwen2.5-Coder-1.5B"}
# The paper's stated points (its text gives the two ends of Fig. 2; the other four models are plotted only).
PAPER = [{"model": "GPT-2", "params": 124e6, "deficit": 0.41}, {"model": "Llama-3-8B", "params": 8.03e9,
                                                                  "deficit": 0.63}]


def count_params(folder: Path) -> int:
    """Elements of every tensor in ``folder/model.safetensors``, from its header alone (as loaded: the Qwen
    GGUF files store the output matrix apart from the embedding, so both count)."""
    with open(folder / "model.safetensors", "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return sum(math.prod(t["shape"]) for k, t in header.items() if k != "__metadata__")


def deficit(path: Path) -> tuple[float, list[float], dict]:
    d = json.loads(path.read_text())
    rows = sorted((r for r in d["rows"] if r.get("table") == "layers" and r["metric"] == "deficit"),
                  key=lambda r: r["layer"])
    per_layer = [r["mean"] for r in rows]
    return sum(per_layer) / len(per_layer), per_layer, d["meta"]


def _spearman(x: list[float], y: list[float]) -> float:
    """Spearman's rho (no ties in these data)."""
    rx = {i: r for r, i in enumerate(sorted(range(len(x)), key=x.__getitem__))}
    ry = {i: r for r, i in enumerate(sorted(range(len(y)), key=y.__getitem__))}
    n = len(x)
    return 1 - 6 * sum((rx[i] - ry[i]) ** 2 for i in range(n)) / (n * (n * n - 1))


def svg(points: list[dict]) -> str:
    """A log-x scatter: ours filled, the paper's open, each labelled."""
    w, h, left, right, top, bottom = 640, 400, 70, 30, 30, 60
    xs = [math.log10(p["params"]) for p in points]
    x0, x1 = math.floor(min(xs) * 2) / 2, math.ceil(max(xs) * 2) / 2
    y0, y1 = 0.3, 0.7

    def px(p):
        return left + (math.log10(p) - x0) / (x1 - x0) * (w - left - right)

    def py(v):
        return top + (y1 - v) / (y1 - y0) * (h - top - bottom)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
           'font-size="12">', f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="black"/>']
    for e in range(int(math.ceil(x0)), int(math.floor(x1)) + 1):
        x = px(10 ** e)
        label = {8: "100M", 9: "1B", 10: "10B"}.get(e, f"1e{e}")
        out += [f'<line x1="{x:.1f}" y1="{h - bottom}" x2="{x:.1f}" y2="{h - bottom + 5}" stroke="black"/>',
                f'<text x="{x:.1f}" y="{h - bottom + 18}" text-anchor="middle">{label}</text>']
    for i in range(5):
        v = y0 + i * (y1 - y0) / 4
        out += [f'<line x1="{left - 5}" y1="{py(v):.1f}" x2="{w - right}" y2="{py(v):.1f}" stroke="#ddd"/>',
                f'<text x="{left - 8}" y="{py(v) + 4:.1f}" text-anchor="end">{v:.1f}</text>']
    out += [f'<text x="{(left + w - right) / 2}" y="{h - 15}" text-anchor="middle">parameters (log scale)</text>',
            f'<text x="18" y="{(top + h - bottom) / 2}" text-anchor="middle" '
            f'transform="rotate(-90 18 {(top + h - bottom) / 2})">attention-only angular deficit</text>']
    for p in points:
        x, y = px(p["params"]), py(p["deficit"])
        ours = p["source"] == "geosteer"
        fill, stroke = ("#1f77b4", "#1f77b4") if ours else ("white", "#d62728")
        out += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5" fill="{fill}" stroke="{stroke}" stroke-width="2"/>',
                f'<text x="{x + (8 if x < w * 0.7 else -8):.1f}" y="{y - 8:.1f}" '
                f'text-anchor="{"start" if x < w * 0.7 else "end"}">{p["model"]} {p["deficit"]:.3f}</text>']
    out += [f'<circle cx="{w - 170}" cy="{top + 5}" r="5" fill="#1f77b4"/>',
            f'<text x="{w - 160}" y="{top + 9}">geosteer (this ladder)</text>',
            f'<circle cx="{w - 170}" cy="{top + 22}" r="5" fill="white" stroke="#d62728" stroke-width="2"/>',
            f'<text x="{w - 160}" y="{top + 26}">the paper (its text)</text>', "</svg>"]
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default="docs/results/ladder/deficit")
    ap.add_argument("--out", required=True, help="the figure's numbers (.json)")
    ap.add_argument("--svg", default=None)
    a = ap.parse_args()
    points = []
    for m in RUNGS:
        path = Path(a.results) / f"{m}.json"
        if not path.is_file():
            continue
        mean, per_layer, meta = deficit(path)
        points.append({"model": LABELS[m], "name": m, "source": "geosteer", "params": count_params(cache_dir() / m),
                       "deficit": mean, "per_layer": per_layer, "tokens": meta["tokens"], "seq_len": meta["seq_len"],
                       "results_file": str(path)})
    ours = {p["name"]: p for p in points}
    summary = {f"deficit_{m.replace('.', '').replace('-', '_')}": ours[m]["deficit"] for m in ours}
    if len(ours) >= 3:  # the ladder's rule for a trend: rank correlation with size, and the family step
        summary["spearman_rho_log_params"] = _spearman([math.log(p["params"]) for p in ours.values()],
                                                       [p["deficit"] for p in ours.values()])
    points += [{**p, "source": "paper"} for p in PAPER]
    doc = {"command": "paper/studies/ladder/run.sh deficit; python paper/studies/ladder/deficit_figure.py "
                      f"--out {a.out}" + (f" --svg {a.svg}" if a.svg else ""), "summary": summary,
           "points": points}
    atomic_write_text(Path(a.out), json.dumps(doc, indent=1) + "\n")
    if a.svg:
        atomic_write_text(Path(a.svg), svg(points))
    for p in points:
        print(f"{p['model']:>20} {p['params'] / 1e6:9.1f}M  {p['deficit']:.4f}  ({p['source']})")


if __name__ == "__main__":
    main()
