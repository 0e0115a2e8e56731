"""Selectivity frontier of the learned-walls study: target suppression vs collateral, read from the tidy JSONs.

One panel per category: x = control next-token KL (log scale), y = mean target log-prob drop on the
held-out prompts; one point per condition (labelled). Plain SVG, no plotting dependency.

    python paper/studies/manifold/wall_learn_figure.py docs/results/manifold_wall_learn_*.json \
        --out docs/results/manifold_wall_learn_frontier.svg
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

W, H, PAD = 460, 340, 60
COLORS = {"exact": "#d62728", "CAA": "#1f77b4", "dense": "#9467bd", "learned": "#2ca02c"}


def _color(name: str) -> str:
    return next((c for k, c in COLORS.items() if name.startswith(k)), "#555")


def panel(doc: dict, x0: int) -> list[str]:
    rows = [r for r in doc["rows"] if "control_kl" in r]
    xs = [max(r["control_kl"], 1e-5) for r in rows]
    ys = [r["target_drop"] for r in rows]
    lx0, lx1 = math.floor(math.log10(min(xs))), math.ceil(math.log10(max(xs)))
    y0, y1 = min(0.0, min(ys)), max(ys) * 1.1 or 1.0

    def px(x):
        return x0 + PAD + (math.log10(x) - lx0) / max(lx1 - lx0, 1) * (W - 2 * PAD)

    def py(y):
        return H - PAD - (y - y0) / (y1 - y0) * (H - 2 * PAD)

    out = [f'<text x="{x0 + W / 2}" y="20" text-anchor="middle" font-weight="bold">{doc["meta"]["category"]} '
           f'(held-out: {doc["meta"]["n_target_heldout"]} target, {doc["meta"]["n_control_heldout"]} control)</text>',
           f'<line x1="{x0 + PAD}" y1="{H - PAD}" x2="{x0 + W - PAD}" y2="{H - PAD}" stroke="black"/>',
           f'<line x1="{x0 + PAD}" y1="{PAD}" x2="{x0 + PAD}" y2="{H - PAD}" stroke="black"/>',
           f'<text x="{x0 + W / 2}" y="{H - 15}" text-anchor="middle">control next-token KL (nats, log scale)</text>',
           f'<text x="{x0 + 15}" y="{H / 2}" transform="rotate(-90 {x0 + 15} {H / 2})" text-anchor="middle">'
           'target log-prob drop (nats)</text>']
    for e in range(lx0, lx1 + 1):
        out.append(f'<text x="{px(10 ** e)}" y="{H - PAD + 15}" text-anchor="middle" font-size="10">1e{e}</text>')
    for k in range(5):
        y = y0 + (y1 - y0) * k / 4
        out.append(f'<text x="{x0 + PAD - 5}" y="{py(y) + 3}" text-anchor="end" font-size="10">{y:.2f}</text>')
    for r, x, y in zip(rows, xs, ys, strict=True):
        c = _color(r["condition"])
        out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="4" fill="{c}"/>')
        out.append(f'<text x="{px(x) + 6:.1f}" y="{py(y) - 5:.1f}" font-size="9" fill="{c}">'
                   f'{r["condition"].replace("exact ", "")}</text>')
    return out


def table(doc: dict) -> str:
    """The rows as a markdown table (what the docs show; numbers straight from the JSON)."""
    ref = doc["rows"][0]
    lines = [f"Reference (shipped surfaces): target log-prob {ref['target_logprob']:.3f}, greedy outputs containing "
             f"the target {ref['target_greedy_rate']:.0%}, held-out ppl {ref['ppl']:.3f}.", "",
             "| condition | target drop (nats) | greedy still produce | control KL | control greedy changed "
             "| ppl ratio |", "|---|---|---|---|---|---|"]
    for r in doc["rows"][1:]:
        still = "n/a" if r["target_still_produced"] is None else f"{r['target_still_produced']:.0%}"
        lines.append(f"| {r['condition']} | {r['target_drop']:.3f} | {still} | {r['control_kl']:.4f} | "
                     f"{r['control_greedy_changed']:.0%} | {r['ppl_ratio']:.4f} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    docs = [json.loads(Path(p).read_text()) for p in args.results]
    body = []
    for i, d in enumerate(docs):
        body += panel(d, i * W)
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{W * len(docs)}" height="{H}" '
           f'font-family="sans-serif" font-size="11"><rect width="100%" height="100%" fill="white"/>'
           + "".join(body) + "</svg>\n")
    from geosteer.io_utils import atomic_write_text

    atomic_write_text(args.out, svg)
    for d in docs:
        print(f"\n{d['meta']['category']}:\n" + table(d))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    from geosteer.errors import one_line_errors

    with one_line_errors():
        main()
