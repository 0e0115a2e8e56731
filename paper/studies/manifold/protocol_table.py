"""Held-out perplexity vs training tokens: all-layer surfaces vs matched LoRA (issue 16 item 1).

Reads the surfaces run's ``<out>.train/history.json`` (``geosteer learn surfaces --eval-every``) and the LoRA
result JSON (``paper/studies/manifold/lora_baseline.py --eval-every``), writes one tidy JSON (rows: method, seed,
step, tokens, held-out ppl, change vs the stock model) and prints a markdown table; ``--figure F.png`` also
draws the curves (plotly + kaleido).

    python paper/studies/manifold/protocol_table.py --surfaces runs/paper-surfaces-all.train/history.json \
        --lora docs/results/manifold_lora_all_262k.json --out docs/results/manifold_protocol_all_262k.json \
        --figure docs/results/manifold_protocol_all_262k.png

``--artifact DIR`` (the surfaces artifact) records its command, layers and parameter count in ``meta``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from geosteer.errors import GeosteerError, one_line_errors
from geosteer_paper.scripts import command_line


def rows_from(surfaces: dict, lora: dict) -> list[dict]:
    cfg = surfaces["meta"]["config"]
    tokens_per_step = cfg["batch_size"] * cfg["seq_len"]
    stock = next((e["ppl"] for e in surfaces["evals"] if e["step"] == 0), None)
    rows = [{"method": "surfaces", "seed": cfg["seed"], "step": e["step"], "tokens": e["step"] * tokens_per_step,
             "heldout_ppl": e["ppl"], "heldout_tokens": e["tokens"]} for e in surfaces["evals"]]
    rows += [{"method": "lora", "seed": r["seed"], "step": r["step"], "tokens": r["tokens"],
              "heldout_ppl": r["heldout_ppl"], "heldout_tokens": r["heldout_tokens"]} for r in lora["rows"]]
    for r in rows:
        r["change_vs_stock"] = None if stock is None else r["heldout_ppl"] / stock - 1
    return sorted(rows, key=lambda r: (r["tokens"], r["method"]))


def _fmt(r: dict | None) -> str:
    if r is None:
        return "—"
    ch = "" if r["change_vs_stock"] is None or r["tokens"] == 0 else f" ({100 * r['change_vs_stock']:+.1f} %)"
    return f"{r['heldout_ppl']:.4f}{ch}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--surfaces", type=Path, required=True, help="<out>.train/history.json of the surfaces run")
    ap.add_argument("--lora", type=Path, required=True, help="lora_baseline.py --result JSON")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--artifact", type=Path, default=None,
                    help="the surfaces artifact folder: its command and parameter count go into meta")
    ap.add_argument("--figure", type=Path, default=None)
    a = ap.parse_args()
    with one_line_errors():
        config = a.artifact / "geosteer_config.json" if a.artifact else None
        for f in (a.surfaces, a.lora, config):
            if f is not None and not f.is_file():
                raise GeosteerError(f"no such file: {f}")
        surfaces, lora = json.loads(a.surfaces.read_text()), json.loads(a.lora.read_text())
    rows = rows_from(surfaces, lora)
    meta = {"command": command_line("manifold/protocol_table.py"),
            "surfaces_config": surfaces["meta"]["config"], "surfaces_params": surfaces["meta"].get("params"),
            "lora_meta": lora["meta"]}
    if config is not None:
        art = json.loads(config.read_text())
        meta.update(surfaces_params=art.get("n_parameters"), surfaces_command=art["meta"].get("command"),
                    surfaces_layers=art.get("layers"), model=art.get("base_model"))
    a.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    print("| tokens | surfaces ppl | LoRA ppl |")
    print("|---|---|---|")
    for t in sorted({r["tokens"] for r in rows}):
        cell = {r["method"]: r for r in rows if r["tokens"] == t}
        print(f"| {t:,} | {_fmt(cell.get('surfaces'))} | {_fmt(cell.get('lora'))} |")
    if a.figure:
        import plotly.graph_objects as go

        fig = go.Figure()
        for m in ("surfaces", "lora"):
            pts = [r for r in rows if r["method"] == m]
            fig.add_scatter(x=[r["tokens"] for r in pts], y=[r["heldout_ppl"] for r in pts], mode="lines+markers",
                            name=m)
        fig.update_layout(xaxis_title="training tokens", yaxis_title="held-out perplexity (32,768 tokens)",
                          title="SmolLM2-135M, all 30 layers: surfaces (grid 8) vs matched LoRA (r 36, q/v)")
        fig.write_image(str(a.figure), width=900, height=500)


if __name__ == "__main__":
    main()
