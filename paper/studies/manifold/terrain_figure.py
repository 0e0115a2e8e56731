"""Figures 2 and 3 of the attention-manifolds paper from a surfaces artifact and a recorded q/k file.

Figure 2: heatmaps of the largest surfaces S_d(q, k) = b(q)ᵀ C_d b(k) over their fitted range (key on x,
query on y; red amplifies the value, S > 0; blue attenuates, S < 0) with each prompt token's post-RoPE
self-pair (q_{i,d}, k_{i,d}) as a labelled dot. Figure 3: one (head, dim) on three consecutive layers
around the strongest surface, the same dots on each (the token's trajectory across layers). The q/k file is
written by ``geosteer measure explore --record-qk`` (one forward on the prompt, no model loaded here).
Writes one SVG (plain, no plotting dependency) and a tidy JSON: per panel the surface, its norm, the
range of S on the grid and at the dots, and how many dots lie inside the fitted range; the share of all
recorded self-pairs inside it.

    geosteer measure explore --surfaces artifacts/smollm2-surfaces-all --no-sensitivity --coverage-windows 0 \
        --record-qk docs/results/manifold/fig2_qk.json --threads 1
    python paper/studies/manifold/terrain_figure.py --surfaces artifacts/smollm2-surfaces-all \
        --qk docs/results/manifold/fig2_qk.json --svg docs/results/manifold/fig2_terrain.svg \
        --out docs/results/manifold/fig2_terrain.json
"""

from __future__ import annotations

import argparse
import base64
import shlex
import struct
import sys
import zlib
from html import escape
from pathlib import Path

N, CELL, PAD, TOP = 48, 5, 34, 40  # grid samples per axis, pixels per sample, margins
SIDE = N * CELL


def colour(v: float, zmax: float) -> str:
    """RdBu reversed: blue (S = −zmax) → white (0) → red (+zmax)."""
    t = max(-1.0, min(1.0, v / zmax)) if zmax > 0 else 0.0
    end = (178, 24, 43) if t > 0 else (33, 102, 172)
    rgb = [round(255 + (e - 255) * abs(t)) for e in end]
    return "#" + "".join(f"{c:02x}" for c in rgb)


def png_uri(z, zmax: float) -> str:
    """The sampled surface as a PNG data URI (one pixel per sample, the highest q on the top row)."""
    rows = b"".join(b"\x00" + bytes.fromhex("".join(colour(float(v), zmax)[1:] for v in z[i]))
                    for i in reversed(range(z.shape[0])))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    head = struct.pack(">IIBBBBB", z.shape[1], z.shape[0], 8, 2, 0, 0, 0)  # 8-bit RGB
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", head) + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b"")
    return "data:image/png;base64," + base64.b64encode(png).decode()


def panel_svg(view, labels, q, k, x0: int, y0: int, zmax: float, title: str) -> list[str]:
    """One heatmap panel with the token dots; the grid's first row (lowest q) is drawn at the bottom."""
    out = [f'<text x="{x0 + SIDE / 2}" y="{y0 - 8}" text-anchor="middle" font-weight="bold">{escape(title)}</text>',
           f'<image x="{x0}" y="{y0}" width="{SIDE}" height="{SIDE}" preserveAspectRatio="none" '
           f'href="{png_uri(view.z, zmax)}"/>']
    lo, hi = view.lo, view.hi

    def px(v):
        return x0 + (v - lo) / (hi - lo) * SIDE

    def py(v):
        return y0 + SIDE - (v - lo) / (hi - lo) * SIDE

    out.append(f'<rect x="{x0}" y="{y0}" width="{SIDE}" height="{SIDE}" fill="none" stroke="black"/>')
    for v in (lo, 0.0, hi):
        out.append(f'<text x="{px(v):.1f}" y="{y0 + SIDE + 14}" text-anchor="middle" font-size="10">{v:g}</text>')
        out.append(f'<text x="{x0 - 4}" y="{py(v) + 3:.1f}" text-anchor="end" font-size="10">{v:g}</text>')
    out.append(f'<text x="{x0 + SIDE / 2}" y="{y0 + SIDE + 27}" text-anchor="middle" font-size="11">k (post-RoPE)'
               '</text>')
    for lab, qv, kv in zip(labels, q, k, strict=True):
        cx, cy = px(min(max(kv, lo), hi)), py(min(max(qv, lo), hi))  # outside the range: drawn on its edge
        ring = "" if lo <= qv <= hi and lo <= kv <= hi else ' stroke="#ff9900" stroke-width="2"'
        out.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="3" fill="black"{ring}/>')
        out.append(f'<text x="{cx + 4:.1f}" y="{cy - 4:.1f}" font-size="10">{escape(lab.strip() or "␣")}</text>')
    return out


def panel_row(bank, rows, layer: int, head: int, dim: int) -> tuple:
    """One panel's surface view, dots and record."""
    from geosteer.viz.surfaces import points_from_rows, surface_at, surface_view

    view = surface_view(bank, layer, head, dim, n=N)
    labels, q, k = points_from_rows(rows, layer, head, dim)
    if not labels:
        raise ValueError(f"the q/k file has no self-pairs for layer {layer} head {head} dim {dim}; record them "
                         "with geosteer measure explore --record-qk")
    s = surface_at(bank, layer, head, dim, q, k)
    inside = sum(view.lo <= a <= view.hi and view.lo <= b <= view.hi for a, b in zip(q, k, strict=True))
    rec = {"layer": layer, "head": head, "dim": dim, "norm": view.norm, "lo": view.lo, "hi": view.hi,
           "s_grid_min": float(view.z.min()), "s_grid_max": float(view.z.max()),
           "s_dots_min": float(s.min()), "s_dots_max": float(s.max()),
           "dots": len(labels), "dots_inside": int(inside)}
    return view, labels, q, k, rec


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--surfaces", default="artifacts/smollm2-surfaces-all")
    ap.add_argument("--qk", type=Path, required=True, help="geosteer measure explore --record-qk file (.json)")
    ap.add_argument("--panels", type=int, default=4, help="Figure 2: the largest surfaces recorded (default 4)")
    ap.add_argument("--svg", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True, help="tidy JSON of the panels")
    a = ap.parse_args(argv)
    from geosteer.io_utils import atomic_write_json, atomic_write_text, read_json
    from geosteer.manifold import load
    from geosteer.viz.surfaces import layer_range, layer_slot, surface_norms

    if a.panels < 1:
        raise ValueError(f"--panels must be at least 1 (got {a.panels})")
    doc = read_json(a.qk, "recorded q/k file")
    rows = doc.get("rows") if isinstance(doc, dict) else None
    if not rows or (doc.get("meta") or {}).get("kind") != "qk-points":
        raise ValueError(f"{a.qk} is not a recorded q/k file (write one with geosteer measure explore --record-qk)")
    bank = load(a.surfaces)
    recorded = sorted({(r["layer"], r["head"], r["dim"]) for r in rows})
    nrm = surface_norms(bank)
    by_norm = sorted(recorded, key=lambda s: -float(nrm[layer_slot(bank, s[0]), s[1], s[2]]))
    fig2 = by_norm[: a.panels]
    top_l, top_h, top_d = by_norm[0]
    fig3 = [(lay, top_h, top_d) for lay in (top_l - 1, top_l, top_l + 1) if (lay, top_h, top_d) in recorded]
    panels = [("fig2", s) for s in fig2] + [("fig3", s) for s in fig3]
    built = [(fig, *panel_row(bank, rows, *s)) for fig, s in panels]
    zmax = max(max(abs(r["s_grid_min"]), abs(r["s_grid_max"])) for *_, r in built)
    cols = max(len(fig2), len(fig3))
    width, height = PAD + cols * (SIDE + PAD + 20), 2 * (TOP + SIDE + 50) + 30
    body, seen = [], {"fig2": 0, "fig3": 0}
    for fig, view, labels, q, k, rec in built:
        x0 = PAD + 20 + seen[fig] * (SIDE + PAD + 20)
        seen[fig] += 1
        y0 = TOP if fig == "fig2" else 2 * TOP + SIDE + 50
        title = f"L{rec['layer']} H{rec['head']} D{rec['dim']} ‖C‖={rec['norm']:.3g}"
        body += panel_svg(view, labels, q, k, x0, y0, zmax, title)
        rec["figure"] = fig
    prompt = (doc.get("meta") or {}).get("prompt", "")
    body.append(f'<text x="{PAD}" y="16" font-size="12">Fig. 2: largest surfaces, dots = token self-pairs '
                f'(q, k) of “{escape(prompt)}”; colour S from −{zmax:.2f} (blue) to +{zmax:.2f} (red); '
                'orange ring: outside the fitted range</text>')
    body.append(f'<text x="{PAD}" y="{TOP + SIDE + 76}" font-size="12">Fig. 3: head {top_h}, dim {top_d} on '
                'consecutive layers (the same tokens on each)</text>')
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
           f'font-size="12"><rect width="100%" height="100%" fill="white"/>{"".join(body)}</svg>\n')
    inside = 0
    for r in rows:
        lo, hi = layer_range(bank, r["layer"])
        inside += lo <= r["q"] <= hi and lo <= r["k"] <= hi
    recs = [rec for *_, rec in built]
    summary = {"panels_fig2": len(fig2), "panels_fig3": len(fig3), "recorded_surfaces": len(recorded),
               "self_pairs": len(rows), "self_pairs_inside_share": inside / len(rows),
               "s_grid_min": min(r["s_grid_min"] for r in recs), "s_grid_max": max(r["s_grid_max"] for r in recs)}
    meta = {"surfaces": a.surfaces, "qk": str(a.qk), "prompt": prompt, "tokens": (doc.get("meta") or {}).get("tokens"),
            "grid_samples": N, "svg": str(a.svg), "command": "python " + shlex.join(sys.argv)}
    atomic_write_text(a.svg, svg)
    atomic_write_json(a.out, {"meta": meta, "summary": summary, "rows": recs})
    print(f"wrote {a.svg} and {a.out}", file=sys.stderr)


if __name__ == "__main__":
    from geosteer.errors import one_line_errors

    with one_line_errors():
        main()
