"""Held-out perplexity with and without surfaces across evaluation contexts (paper 1: surfaces trained at
context 128 "learn position-aware routing patterns within the training context length").

Runs ``geosteer ppl`` once per context and setting (stride = context / 2, the tokenizer's encoding) and writes
one row per context with both perplexities and the relative change; the file is written after every context
and a rerun skips the contexts it already holds.

    python paper/studies/manifold/context_sweep.py --surfaces artifacts/smollm2-surfaces-all \
        --contexts 64,128,256,512,1024,2048 --max-tokens 4096 --out docs/results/manifold/context_sweep_4k.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

from geosteer_paper.scripts import command_line


def _ppl(args: list[str]) -> dict:
    run = subprocess.run(args, capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"{shlex.join(args)} failed ({run.returncode}): {run.stderr.strip()[-400:]}")
    return json.loads(run.stdout[run.stdout.index("{"):])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--surfaces", required=True)
    ap.add_argument("--contexts", default="64,128,256,512,1024,2048")
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    exe = str(Path(sys.executable).with_name("geosteer"))
    out = Path(a.out)
    meta = {"model": a.model, "surfaces": a.surfaces, "max_tokens": a.max_tokens, "encoding": "tokenizer",
            "command": command_line("manifold/context_sweep.py")}
    rows = json.loads(out.read_text())["rows"] if out.is_file() else []  # resume: contexts already measured
    done = {r["context"] for r in rows}
    for ctx in (int(c) for c in a.contexts.split(",") if int(c) not in done):
        base = [exe, "ppl", "--model", a.model, "--corpus", "heldout", "--max-tokens", str(a.max_tokens),
                "--context", str(ctx), "--stride", str(max(1, ctx // 2)), "--threads", str(a.threads), "--json"]
        stock, surf = _ppl(base), _ppl(base + ["--surfaces", a.surfaces])
        rows.append({"context": ctx, "stride": max(1, ctx // 2), "tokens": stock["tokens"], "stock_ppl": stock["ppl"],
                     "surfaces_ppl": surf["ppl"], "change_pct": 100 * (surf["ppl"] / stock["ppl"] - 1)})
        print(json.dumps(rows[-1]), flush=True)
        rows.sort(key=lambda r: r["context"])
        out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")  # a checkpoint per context


if __name__ == "__main__":
    main()
