"""Markdown tables for docs/dynamics.md from the tidy result files (no recomputation).

    .venv/bin/python paper/studies/dynamics/tables.py docs/results/dynamics/smollm2
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def md(rows: list[dict], cols: list[str], fmt: str = "{:.4g}") -> str:
    def f(v):
        return fmt.format(v) if isinstance(v, float) else str(v)

    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(f(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(out)


def load(d: Path, name: str) -> dict | None:
    p = d / name
    return json.loads(p.read_text()) if p.is_file() else None


def main(d: Path) -> None:
    diag = load(d, "diagnose.json")
    if diag:
        layers: dict[int, dict] = {}
        for r in diag["rows"]:
            if r["table"] == "layers":
                layers.setdefault(r["layer"], {"layer": r["layer"]})[r["metric"]] = r["mean"]
        rows = [layers[k] for k in sorted(layers)]
        print("### Per-layer diagnostics\n")
        print(md(rows, ["layer", "deficit", "du_norm", "ffn_tangential_frac", "defect", "commutator", "div_pre",
                        "ddiv_attn", "ddiv_ffn", "norm_cv_bulk"], "{:.3f}"))
        mean = {k: statistics.mean(r[k] for r in rows) for k in ("deficit", "cos_gap", "ddiv_attn", "ddiv_ffn",
                                                                  "ffn_tangential_frac", "defect")}
        print("\nmeans over layers:", json.dumps({k: round(v, 4) for k, v in mean.items()}))
        print("layers with ddiv_attn < 0:", sum(r["ddiv_attn"] < 0 for r in rows), "/", len(rows),
              "; with ddiv_ffn > 0:", sum(r["ddiv_ffn"] > 0 for r in rows), "/", len(rows))
        topk = [r for r in diag["rows"] if r["table"] == "topk"]
        if topk:
            print("\n### Top-k\n")
            print(md(topk, ["k", "cos_mean", "loss_stock", "loss", "loss_increase"]))
        print("\nOV:", json.dumps(diag["meta"].get("ov")))
    for name, cols, title in (("ablate.json", ["variant", "layers", "loss", "loss_increase"], "FFN variants"),
                              ("gains.json", ["gain", "value", "loss", "loss_increase"], "Gains")):
        r = load(d, name)
        if r:
            print(f"\n### {title}\n")
            print(md(r["rows"], cols))
    par = load(d, "parallel.json")
    if par:
        curve = [r for r in par["rows"] if r["table"] == "curve"]
        counts = sorted({r["n_parallel"] for r in curve})
        table = []
        for c in counts:
            row = {"n_parallel": c}
            for s in ("low", "high"):
                row[f"dL_{s}"] = next(r["loss_increase"] for r in curve if r["strategy"] == s and r["n_parallel"] == c)
            rnd = [r["loss_increase"] for r in curve if r["strategy"] == "random" and r["n_parallel"] == c]
            row["dL_random_mean"] = statistics.mean(rnd)
            row["dL_random_min"], row["dL_random_max"] = min(rnd), max(rnd)
            meas = [r for r in curve if r["strategy"] == "measured" and r["n_parallel"] == c]
            if meas:
                row["dL_measured"] = meas[0]["loss_increase"]
            row["speedup_est_low"] = next(r["speedup_est"] for r in curve
                                          if r["strategy"] == "low" and r["n_parallel"] == c)
            table.append(row)
        print("\n### Parallelisation curve\n")
        print(md(table, list(table[0])))
        print("\n### Safe speed-up\n")
        print(md([r for r in par["rows"] if r["table"] == "safe"],
                 ["strategy", "threshold", "seeds", "max_layers", "speedup_est"]))
        low = [r for r in curve if r["strategy"] == "low"]
        print("\nlow-C order:", next(r["layers"] for r in low if r["n_parallel"] == max(counts)))
        single = sorted((r for r in par["rows"] if r["table"] == "single"), key=lambda r: r["layer"])
        if single:
            print("\n### Each layer parallelised alone\n")
            print(md(single, ["layer", "defect", "loss_increase"]))
            rho = [r for r in par["rows"] if r["table"] == "defect_vs_single"]
            if rho:
                print("\nSpearman C_l vs single-layer dL:", json.dumps({k: rho[0][k] for k in
                                                                       ("spearman_rho", "p_value", "layers")}))
    g = load(d, "gates.json")
    if g:
        print("\n### Gates\n")
        gates = [r for r in g["rows"] if r["table"] == "gates"]
        print(" ".join(f"{r['layer']}:{r['alpha']:.3f}" for r in gates))
        print(md([r for r in g["rows"] if r["table"] == "summary"],
                 ["mean", "min", "max", "loss_alpha1", "loss_gates", "delta_loss", "eval_tokens"]))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/results/dynamics/smollm2"))
