"""Tidy table of equal-token runs: surfaces artifacts and LoRA result files, one row each.

Reads what the runs wrote (never recomputes): a surfaces artifact folder's ``meta.training`` (config and
held-out ppl before/after; grid, per-layer range, parameters) or a ``lora_baseline.py`` result JSON. Writes
JSON (rows + the commands that made them; ``vs_first_pct``: each row's ppl against the first source's) and
prints a markdown table.

    python paper/studies/manifold/sweep_table.py runs/surf-full runs/surf-lr1e-1 \
        docs/results/manifold_lora_r36.json docs/results/manifold_lora_r36_lr1e-2.json \
        --out docs/results/manifold_equal_tokens_sweep.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from geosteer.io_utils import atomic_write_json


def surfaces_row(folder: Path) -> dict:
    config = json.loads((folder / "geosteer_config.json").read_text())
    meta = config["meta"]["training"]
    cfg, ho = meta["config"], meta["heldout"]
    return {"method": "surfaces", "source": str(folder), "lr": cfg["lr"], "seed": cfg["seed"],
            "tokens": meta.get("tokens"), "ppl_before": ho["ppl_before"],
            "ppl_after": ho["ppl_after"], "heldout_tokens": ho["evals"][-1]["tokens"] if ho.get("evals") else None,
            "grid": config.get("grid_size"), "params": config.get("n_parameters"),
            "calibrated": config["meta"].get("calibration") is not None,
            "lo": config.get("lo"), "hi": config.get("hi"),
            "command": meta.get("command") or config["meta"].get("command")}


def lora_row(path: Path, ppl_before: float | None) -> dict:
    d = json.loads(path.read_text())
    row, meta = d["rows"][-1], d["meta"]
    return {"method": f"lora r{row['rank']}", "source": str(path), "lr": meta["train_config"]["lr"],
            "seed": row["seed"], "tokens": row["tokens"], "ppl_before": ppl_before,
            "ppl_after": row["heldout_ppl"], "command": meta.get("command")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sources", nargs="+", type=Path, help="surfaces artifact folders and LoRA result JSONs")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    rows = [surfaces_row(s) for s in a.sources if s.is_dir()]
    before = rows[0]["ppl_before"] if rows else None
    rows += [lora_row(s, before) for s in a.sources if not s.is_dir()]
    for r in rows:
        if r["ppl_before"]:
            r["change_pct"] = 100.0 * (r["ppl_after"] / r["ppl_before"] - 1.0)
        r["vs_first_pct"] = 100.0 * (r["ppl_after"] / rows[0]["ppl_after"] - 1.0)
    atomic_write_json(a.out, {"meta": {"command": "python paper/studies/manifold/sweep_table.py "
                                       + " ".join(map(str, a.sources)) + f" --out {a.out}"}, "rows": rows})
    print("| method | grid, range | lr | seed | held-out ppl | change | vs first |\n|---|---|---|---|---|---|---|")
    for r in rows:
        ch = f"{r['change_pct']:+.1f} %" if "change_pct" in r else "—"
        print(f"| {r['method']} | {_grid_range(r)} | {r['lr']:g} | {r['seed']} | {r['ppl_after']:.4f} | {ch} "
              f"| {r['vs_first_pct']:+.2f} % |")


def _grid_range(r: dict) -> str:
    if r.get("grid") is None:
        return "—"
    if r["calibrated"]:
        return f"{r['grid']}, calibrated (±{min(r['hi']):.2f}…±{max(r['hi']):.2f})"
    return f"{r['grid']}, [{r['lo'][0]:g}, {r['hi'][0]:g}]"


if __name__ == "__main__":
    main()
