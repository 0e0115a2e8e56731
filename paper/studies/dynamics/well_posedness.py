"""Numerical check of paper 2's Thm 1 (a unique global flow on the product of spheres) on real fields:
the RK4 flows of the theory study (real residual directions of a layer under its full field, FFN gain α),
run with step dt, dt/2 and dt/4 to the same time; if the flow is well posed the three runs converge to one
trajectory at the method's order (the gap shrinks about 16× per halving for RK4) and stay on the sphere.

    python paper/studies/dynamics/well_posedness.py --layers 5,15 --alphas 0,1 --steps 200 --dt 0.1 \
        --out docs/results/dynamics/smollm2/well_posedness.json
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from geosteer_paper.scripts import command_line


def _max_angle_deg(a, b) -> float:
    import torch

    cos = (a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1))
    return float(torch.rad2deg(torch.arccos(cos.clamp(-1.0, 1.0))).max())


def main() -> None:
    import torch

    from geosteer.dynamics.diagnostics import corpus_windows
    from geosteer.models.loading import load_model
    from geosteer_paper.dynamics.critical import residual_seeds
    from geosteer_paper.dynamics.fields import ReducedField, layer_fields
    from geosteer_paper.dynamics.theory import flow_path

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--layers", default="5,15")
    ap.add_argument("--alphas", default="0,1")
    ap.add_argument("--residuals", type=int, default=128)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--dt", type=float, default=0.1)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    m, tok = load_model(a.model)
    ids = corpus_windows(tok, "heldout", a.tokens, a.seq_len)
    rows = []
    for ell in (int(x) for x in a.layers.split(",")):
        full = layer_fields(m, ell, ("full",), ov_norm="gain")["full"]
        u = residual_seeds(m, ids, ell, a.residuals, a.seed)
        for alpha in (float(x) for x in a.alphas.split(",")):
            field = ReducedField("full", V=full.V, phi=full.phi, alpha=alpha)
            ends = [flow_path(field, u, a.steps * k, a.dt / k, every=a.steps * k)[-1] for k in (1, 2, 4)]
            gap1, gap2 = _max_angle_deg(ends[0], ends[1]), _max_angle_deg(ends[1], ends[2])
            drift = max(float((e.norm(dim=-1) - 1).abs().max()) for e in ends)
            order = math.log2(gap1 / gap2) if gap2 > 0 and gap1 > 0 else float("nan")
            rows.append({"layer": ell, "alpha": alpha, "time": a.steps * a.dt, "gap_dt_half_deg": gap1,
                         "gap_half_quarter_deg": gap2, "observed_order": order, "sphere_drift": drift,
                         "move_deg": _max_angle_deg(u, ends[2])})
            print(json.dumps(rows[-1]), flush=True)
    meta = {"model": a.model, "residuals": a.residuals, "steps": a.steps, "dt": a.dt, "seed": a.seed,
            "encoding": "bos-window",
            "command": command_line("dynamics/well_posedness.py")}
    summary = {"order_min": min(r["observed_order"] for r in rows),
               "gap_quarter_max_deg": max(r["gap_half_quarter_deg"] for r in rows),
               "sphere_drift_max": max(r["sphere_drift"] for r in rows)}
    Path(a.out).write_text(json.dumps({"meta": meta, "summary": summary, "rows": rows}, indent=1) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
