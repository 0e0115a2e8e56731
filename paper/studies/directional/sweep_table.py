"""Markdown tables of study 1 from the tidy sweep files (no recomputation).

    .venv/bin/python paper/studies/directional/sweep_table.py [FILE.json ...]

Default: the sweep measured with the tokenizer's encoding (``sweep_smollm2_1k_tokenizer.json``); the files
of the earlier BOS-first sweep (``sweep_value.json sweep_resid.json``) can be named instead.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

D = Path(__file__).resolve().parents[3] / "docs" / "results" / "directional"  # the results files


def main() -> None:
    rows = []
    for name in sys.argv[1:] or ["sweep_smollm2_1k_tokenizer.json"]:
        p = Path(name) if Path(name).is_file() else D / name
        if p.is_file():
            rows += json.loads(p.read_text())["rows"]
    base = next(r["ppl"] for r in rows if r["site"] == "none")
    print(f"baseline PPL {base:.3f}\n")
    sites = [s for s in ("value_exclude_self", "attn_out", "mlp_out") if any(r["site"] == s for r in rows)]
    for axis, fixed, label in (("s_par", "s_perp", "s∥ (s⊥ = 1)"), ("s_perp", "s_par", "s⊥ (s∥ = 1)")):
        vals = sorted({r[axis] for r in rows if r["site"] in sites and r[fixed] == 1.0 and r[axis] != 1.0})
        print(f"| {label} | " + " | ".join(sites) + " |")
        print("|---" * (len(sites) + 1) + "|")
        for v in vals:
            cells = []
            for s in sites:
                hit = [r for r in rows if r["site"] == s and r[axis] == v and r[fixed] == 1.0]
                cells.append(f"{hit[0]['ppl']:.4g}" if hit else "")
            print(f"| {v:g} | " + " | ".join(cells) + " |")
        print()
    for r in rows:
        if r["site"] in ("value_full", "diag_removal"):
            print(f"control {r['site']}: PPL {r['ppl']:.3f} (Δ {r['ppl'] - base:+.3f})")


if __name__ == "__main__":
    main()
