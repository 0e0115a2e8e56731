"""Change rate vs surface strength, and asymmetry per layer, read from the tidy JSONs of the two studies.

Left: share of prompts whose greedy output changes against the coefficient scale s (s = 0 is the stock
model), with the paper's 69–83 % band. Right: the antisymmetric share of the control nets and of the sampled
surfaces per layer, with the value of an i.i.d. Gaussian control net. Plain SVG, no plotting dependency.

    python paper/studies/manifold/strength_figure.py docs/results/manifold/strength_subset24.json \
        docs/results/manifold/asymmetry.json --out docs/results/manifold/strength_asymmetry.svg
"""

from __future__ import annotations

import argparse
from pathlib import Path

W, H, PAD = 420, 320, 56


def _axes(x0: int, title: str, xlabel: str, ylabel: str) -> list[str]:
    return [f'<text x="{x0 + W / 2}" y="20" text-anchor="middle" font-weight="bold">{title}</text>',
            f'<line x1="{x0 + PAD}" y1="{H - PAD}" x2="{x0 + W - PAD}" y2="{H - PAD}" stroke="black"/>',
            f'<line x1="{x0 + PAD}" y1="{PAD}" x2="{x0 + PAD}" y2="{H - PAD}" stroke="black"/>',
            f'<text x="{x0 + W / 2}" y="{H - 14}" text-anchor="middle">{xlabel}</text>',
            f'<text x="{x0 + 14}" y="{H / 2}" text-anchor="middle" transform="rotate(-90 {x0 + 14} {H / 2})">'
            f'{ylabel}</text>']


def strength_panel(doc: dict, x0: int) -> list[str]:
    pts = [(0.0, 0.0)] + sorted((r["scale"], r["greedy_change_rate"]) for r in doc["summary"]
                                if r["category"] == "all")
    x1 = max(s for s, _ in pts)

    def px(s):
        return x0 + PAD + s / x1 * (W - 2 * PAD)

    def py(v):
        return H - PAD - v * (H - 2 * PAD)

    lo, hi = doc["meta"].get("paper_change_rate", [0.69, 0.83])
    out = _axes(x0, f"greedy change vs strength ({doc['meta']['prompts']} prompts)", "coefficient scale s",
                "greedy output changed")
    out.append(f'<rect x="{px(0)}" y="{py(hi)}" width="{px(x1) - px(0)}" height="{py(lo) - py(hi)}" '
               f'fill="#ffcc66" opacity="0.4"/><text x="{px(x1) - 4}" y="{py(hi) - 4}" text-anchor="end" '
               f'font-size="11">paper 69–83 %</text>')
    for v in (0, 0.5, 1):
        out.append(f'<text x="{x0 + PAD - 6}" y="{py(v) + 4}" text-anchor="end" font-size="11">{v:.0%}</text>')
    for s, _ in pts:
        out.append(f'<text x="{px(s)}" y="{H - PAD + 16}" text-anchor="middle" font-size="11">{s:g}</text>')
    path = " ".join(f"{px(s):.1f},{py(v):.1f}" for s, v in pts)
    out.append(f'<polyline points="{path}" fill="none" stroke="#1f77b4" stroke-width="2"/>')
    out += [f'<circle cx="{px(s):.1f}" cy="{py(v):.1f}" r="3.5" fill="#1f77b4"/>' for s, v in pts]
    return out


def asymmetry_panel(doc: dict, x0: int) -> list[str]:
    rows = doc["rows"]
    n = len(rows)

    def px(i):
        return x0 + PAD + (i + 0.5) / n * (W - 2 * PAD)

    def py(v):
        return H - PAD - v * (H - 2 * PAD)

    ref = doc["meta"]["iid_gaussian_reference"]
    out = _axes(x0, "asymmetry per layer", "layer", "antisymmetric share")
    out.append(f'<line x1="{x0 + PAD}" y1="{py(ref)}" x2="{x0 + W - PAD}" y2="{py(ref)}" stroke="#999" '
               f'stroke-dasharray="4 3"/><text x="{x0 + W - PAD}" y="{py(ref) - 4}" text-anchor="end" '
               f'font-size="11">i.i.d. Gaussian net {ref:.2f}</text>')
    for v in (0, 0.5, 1):
        out.append(f'<text x="{x0 + PAD - 6}" y="{py(v) + 4}" text-anchor="end" font-size="11">{v:g}</text>')
    for i, r in enumerate(rows):
        out.append(f'<text x="{px(i)}" y="{H - PAD + 16}" text-anchor="middle" font-size="11">{r["layer"]}</text>')
        out.append(f'<circle cx="{px(i) - 4:.1f}" cy="{py(r["coef_mean"]):.1f}" r="4" fill="#d62728"/>')
        out.append(f'<rect x="{px(i) + 1:.1f}" y="{py(r["sampled_mean"]) - 3.5:.1f}" width="7" height="7" '
                   'fill="#2ca02c"/>')
    out.append(f'<text x="{x0 + PAD + 6}" y="{PAD + 4}" font-size="11" fill="#d62728">● control net C</text>')
    out.append(f'<text x="{x0 + PAD + 6}" y="{PAD + 18}" font-size="11" fill="#2ca02c">■ sampled S on [lo, hi]²'
               '</text>')
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("strength", type=Path, help="JSON of geosteer study manifold strength")
    ap.add_argument("asymmetry", type=Path, help="JSON of geosteer study manifold asymmetry")
    ap.add_argument("--out", type=Path, required=True, help="SVG file to write")
    a = ap.parse_args()
    from geosteer.errors import one_line_errors
    from geosteer.io_utils import atomic_write_text, read_json

    with one_line_errors():
        body = (strength_panel(read_json(a.strength, "strength results"), 0)
                + asymmetry_panel(read_json(a.asymmetry, "asymmetry results"), W))
        svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * W}" height="{H}" font-family="sans-serif" '
               f'font-size="13"><rect width="100%" height="100%" fill="white"/>{"".join(body)}</svg>\n')
        atomic_write_text(a.out, svg)
        print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
