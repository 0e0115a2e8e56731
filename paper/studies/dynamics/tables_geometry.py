"""Print the issue-13 tables of docs/dynamics.md from the result files (run from the repository root).

    .venv/bin/python paper/studies/dynamics/tables_geometry.py [docs/results/dynamics/smollm2]

Critical candidates are read from every ``critical*.json`` of the folder (one file per run, e.g. one per
layer), gain by depth from every ``gain_depth*.json`` (a later run adds depths), pressure from every
``pressure*.json``; the row label is the folder name.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

PAPER_T2 = {  # paper Table 2 / Table 6: A/S/R (S-like %) per field
    "GPT-2": ("6/25/3 (73.5%)", "3/14/4 (66.7%)", "3/13/5 (61.9%)"),
    "GPT-2-large": ("2/17/3 (77.3%)", "2/32/3 (86.5%)", "2/30/4 (83.3%)"),
    "Pythia-410M": ("2/21/3 (80.8%)", "1/30/5 (83.3%)", "1/29/6 (80.6%)"),
    "Pythia-1.4B": ("5/10/3 (55.6%)", "2/42/2 (91.3%)", "2/44/1 (93.6%)"),
    "All four (paper)": ("15/73/12 (73.0%)", "8/118/14 (84.3%)", "8/116/16 (82.9%)"),
}


def _rows(path: Path) -> list[dict]:
    return json.loads(path.read_text())["rows"] if path.exists() else []


def _rows_glob(d: Path, pattern: str) -> list[dict]:
    return [r for p in sorted(d.glob(pattern)) for r in _rows(p)]


def _cell(s: dict | None) -> str:
    if not s or not s["n"]:
        return "0 found"
    return f"{s['A']}/{s['S']}/{s['R']} ({100 * s['s_fraction']:.1f}%), n = {s['n']}"


def critical(d: Path) -> None:
    rows = [r for r in _rows_glob(d, "critical*.json") if r["table"] == "summary" and r["layer"] != "all"]
    if not rows:
        return
    get = {(r["layer"], r["field"], r["stage"]): r for r in rows}
    for (_, f, stage) in list(get):  # the pooled row, summed over the per-layer rows of every file
        sel = [r for (layer, ff, st), r in get.items() if layer != "all" and (ff, st) == (f, stage)]
        tot = {k: sum(r[k] for r in sel) for k in ("n", "A", "S", "R")}
        get[("all", f, stage)] = {**tot, "s_fraction": tot["S"] / tot["n"] if tot["n"] else float("nan")}
    print("| model / layer | stage | attention-only P_uVu | FFN-only P_uΦ(u) | full P_u(Vu+Φ(u)) |")
    print("|---|---|---|---|---|")
    for name, cells in PAPER_T2.items():
        print(f"| {name} | paper, candidates | " + " | ".join(cells) + " |")
    layers = sorted({r["layer"] for r in rows if r["layer"] != "all"}) + ["all"]
    for layer in layers:
        for stage in ("candidate", "refined", "exact"):
            cells = [_cell(get.get((layer, f, stage))) if (layer, f, stage) in get else "—"
                     for f in ("ov", "ffn", "full")]
            if all(c == "—" for c in cells):
                continue
            print(f"| {d.name} layer {layer} | {stage} | " + " | ".join(cells) + " |")
    for r in rows:
        if r["stage"] == "candidate":
            print(f"  layer {r['layer']} {r['field']}: {r['seeds_below']} of {r['seeds']} seeds below the threshold, "
                  f"end score min {r['end_score_min']:.4f} median {r['end_score_median']:.4f}, {r['seconds']:.0f} s")
    cand = [r for r in _rows_glob(d, "critical*.json") if r["table"] == "candidate"]
    if cand:
        surv = sum(r["survives"] for r in cand)
        conv = sum(r["converged"] for r in cand)
        print(f"\ncandidates: {len(cand)}; refined to score <= 1e-8: {conv}; label unchanged by refinement: {surv}")
        for f in ("ov", "ffn", "full"):
            sel = [r for r in cand if r["field"] == f]
            if sel:
                ang = sorted(r["angle_deg"] for r in sel)
                print(f"  {f}: {len(sel)} candidates, {sum(r['converged'] for r in sel)} converged, "
                      f"{sum(r['survives'] for r in sel)} labels survive, median move {ang[len(ang) // 2]:.2f} deg, "
                      f"sources {sum(r['source'] == 'residual' for r in sel)} residual / "
                      f"{sum(r['source'] == 'random' for r in sel)} random; saddle index median "
                      f"{sorted(r['n_pos'] for r in sel)[len(sel) // 2]}, complex eigenvalues median "
                      f"{sorted(r['n_complex'] for r in sel)[len(sel) // 2]}; score median "
                      f"{sorted(r['score'] for r in sel)[len(sel) // 2]:.4f} -> refined "
                      f"{sorted(r['refined_score'] for r in sel)[len(sel) // 2]:.4f}")


def commutator(d: Path) -> None:
    p = d / "commutator.json"
    if not p.exists():
        return
    obj = json.loads(p.read_text())
    rows = [r for r in obj["rows"] if r["table"] == "layers"]
    print("\n| layer | C (tangential) | FFN half | attention half | reorder angle (deg) | block step (deg) | "
          "ρ tokens | cos(pred, measured) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['layer']} | {r['commutator']:.3g} | {r['ffn_half']:.3g} | {r['attn_half']:.3g} | "
              f"{r['reorder_angle_deg']:.2f} | {r['step_angle_deg']:.2f} | {r['rho_tokens']:.2f} | "
              f"{r['cos_pred_vs_measured']:.2f} |")
    s = [r for r in obj["rows"] if r["table"] == "summary"][0]
    print(f"\nacross layers: Spearman rho(C, reorder angle) = {s['rho_layers']:.2f}; "
          f"rho(C, angle / step) = {s['rho_layers_relative']:.2f}")


def pressure(d: Path) -> None:
    for p in sorted(d.glob("pressure*.json")):
        _pressure(p)


def _pressure(p: Path) -> None:
    rows = [r for r in _rows(p) if r["table"] == "summary"]
    if not rows:
        return
    print(f"\n{p.name}\n\n| β_A | FFN variant | loss | D after last pressured layer | D final "
          "| mean D from first pressured |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['beta']:g} | {r['variant']} | {r['loss']:.3f} | {r['D_last_pressured']:.3f} | "
              f"{r['D_final']:.3f} | {r['D_mean_from_first']:.3f} |")


def gain_depth(d: Path) -> None:
    rows = _rows_glob(d, "gain_depth*.json")
    if not rows:
        return
    vals = sorted({r["alpha_ffn"] for r in rows})
    print("\n| ℓ/L | layer | " + " | ".join(f"ΔL at α_F = {v:g}" for v in vals) + " |")
    print("|---|---|" + "---|" * len(vals))
    for dep in sorted({r["depth"] for r in rows}):
        sel = {r["alpha_ffn"]: r for r in rows if r["depth"] == dep}
        layer = next(iter(sel.values()))["layer"]
        print(f"| {dep:g} | {layer} | " + " | ".join(f"{sel[v]['loss_increase']:+.3f}" for v in vals) + " |")


def split(d: Path) -> None:
    rows = _rows(d / "split_options.json")
    if not rows:
        return
    print("\n| variant | u | BOS | loss | ΔL |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['variant']} | {r['reference']} | {r['bos']} | {r['loss']:.3f} | {r['loss_increase']:+.3f} |")


if __name__ == "__main__":
    d = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/results/dynamics/smollm2")
    for f in (critical, commutator, pressure, gain_depth, split):
        f(d)
