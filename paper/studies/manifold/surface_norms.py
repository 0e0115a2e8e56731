"""Per-surface coefficient norms ‖C_d‖ of a surfaces artifact (paper 1, §5: "Most surfaces per layer have
small norms, while a long tail of high-norm surfaces provides strong corrections"; "Layer 8 has the strongest
surface (‖C‖ = 3.69); adjacent layers are nearly flat").

One row per layer: the distribution of its surfaces' Frobenius norms (heads × dims surfaces) — median, 90th
and 99th percentiles, max, skewness, the max over the median, the share of the squared norm held by the top
1 % of surfaces — and the whole-layer norm. Reads the artifact's tensors only; no model is loaded.

    python paper/studies/manifold/surface_norms.py artifacts/smollm2-surfaces-all \
        --out docs/results/manifold/surface_norms_all.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

from geosteer_paper.scripts import command_line


def layer_row(layer: int, coef: np.ndarray) -> dict:
    """Statistics of one layer's surfaces; ``coef`` (heads, dims, K, K)."""
    n = np.sqrt((coef.astype(np.float64) ** 2).sum(axis=(-2, -1))).ravel()
    med = float(np.median(n))
    sq = np.sort(n ** 2)[::-1]
    top = max(1, int(round(0.01 * n.size)))
    z = (n - n.mean()) / n.std() if n.std() > 0 else np.zeros_like(n)
    return {"layer": layer, "surfaces": int(n.size), "median": med, "p90": float(np.quantile(n, 0.9)),
            "p99": float(np.quantile(n, 0.99)), "max": float(n.max()), "skewness": float((z ** 3).mean()),
            "max_over_median": float(n.max() / med) if med > 0 else float("inf"),
            "top1pct_energy_share": float(sq[:top].sum() / sq.sum()), "top1pct_count_share": top / n.size,
            "layer_norm": float(np.sqrt((n ** 2).sum()))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("artifact")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    folder = Path(a.artifact)
    config = json.loads((folder / "geosteer_config.json").read_text())
    coef = load_file(str(folder / "surfaces.safetensors"))["coefficients"]  # (layers, heads, dims, K, K)
    layers = config.get("layers") or list(range(coef.shape[0]))
    rows = [layer_row(int(layer), coef[i]) for i, layer in enumerate(layers)]
    tops = [r["max"] for r in rows]
    best = int(np.argmax(tops))
    neighbours = [tops[j] for j in (best - 1, best + 1) if 0 <= j < len(tops)]
    summary = {"strongest_layer": rows[best]["layer"], "strongest_norm": tops[best],
               "strongest_over_neighbours": tops[best] / max(neighbours) if neighbours else None,
               "skewness_min": min(r["skewness"] for r in rows),
               "max_over_median_min": min(r["max_over_median"] for r in rows),
               "top1pct_energy_share_mean": float(np.mean([r["top1pct_energy_share"] for r in rows]))}
    meta = {"artifact": str(folder), "grid_size": config.get("grid_size"),
            "command": command_line("manifold/surface_norms.py")}
    Path(a.out).write_text(json.dumps({"meta": meta, "summary": summary, "rows": rows}, indent=1) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
