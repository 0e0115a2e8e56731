"""Collect the manifold study results into tidy tables and docs/manifold-study-results.md (generated).

Reads what exists (artifacts, LoRA result, comparison and steering JSON) and skips what does not.

    python paper/studies/manifold/report.py
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from geosteer.io_utils import atomic_write_csv, atomic_write_text

ROOT = Path(__file__).resolve().parents[3]
RES = ROOT / "docs" / "results"
SURFACES = {"surfaces grid 8": ROOT / "artifacts" / "smollm2-surfaces",
            "surfaces grid 16": ROOT / "runs" / "smollm2-surfaces-g16"}
LORA = RES / "manifold_lora_r36.json"
SWEEP = RES / "manifold_equal_tokens_sweep.json"  # holds the stock ppl on the LoRA run's evaluation tokens
# spellings a results file may record -> today's (same options): the verbs renamed when learners became
# `geosteer learn ...` and measurements `geosteer measure ...`, and the output-study runner that moved out of
# the library into paper/studies/manifold
RENAMED = {
    "geosteer manifold train ": "geosteer learn surfaces ",
    "geosteer manifold wall-learn ": "geosteer learn walls ",
    "geosteer manifold steer-learn ": "geosteer learn steering-surfaces ",
    "geosteer manifold explore ": "geosteer measure explore ",
    "python -m geosteer.manifold.studies ": "python paper/studies/manifold/steering.py ",
    "python studies/": "python paper/studies/",
}
# options renamed on `geosteer learn surfaces` (then `geosteer manifold train`): window length and batch size
OPTIONS = {"--seq-len": "--context", "--batch": "--batch-size"}
APPLIED: dict[str, str] = {}  # the renames today() made, for the page's note


def today(cmd: str) -> str:
    """``cmd`` in today's spelling: each renamed verb replaced where a command of the line starts with it."""
    for old, new in RENAMED.items():
        cmd, n = re.subn(r"(^|;\s*|&&\s*)" + re.escape(old), lambda m, new=new: m.group(1) + new, cmd)
        if n:
            APPLIED[f"`{old.strip()}`"] = f"`{new.strip()}`"
    if cmd.startswith("geosteer learn surfaces "):
        for old, new in OPTIONS.items():
            cmd, n = re.subn(re.escape(old) + r"(?=\s|$)", new, cmd)
            if n:
                APPLIED[f"`{old}` of `geosteer manifold train`"] = f"`{new}`"
    return cmd


def note() -> list[str]:
    """The renames the page's commands went through (none: nothing to say)."""
    if not APPLIED:
        return []
    return ["Commands are printed as they run today; the results files record the spellings of their time: "
            + ", ".join(f"{old} is now {new}" for old, new in APPLIED.items()) + ".", ""]


def _command(cmd: str) -> str:
    return f"`{today(cmd)}`"


def _load(p: Path):
    return json.loads(p.read_text()) if p.is_file() else None


def _stock_row(ppl: float, cap: int, seed: int, command: str) -> dict:
    return {"method": "stock", "params": 0, "train_tokens": 0, "heldout_ppl": ppl, "heldout_tokens_cap": cap,
            "seed": seed, "command": command}


def lora_stock_reference(cap: int) -> dict | None:
    """The stock model's ppl on the LoRA run's own evaluation tokens, as the equal-token sweep recorded it
    (the step-0 evaluation of the surfaces run with the same held-out cap)."""
    sweep = _load(SWEEP)
    if sweep is None:
        return None
    source = str(LORA.relative_to(ROOT))
    hit = next((r for r in sweep["rows"] if r["source"] == source and r.get("ppl_before")), None)
    if hit is None:
        return None
    return _stock_row(hit["ppl_before"], cap, hit["seed"], sweep["meta"]["command"]
                      + f"  (ppl before training; the reference of {source})")


def ppl_rows() -> list[dict]:
    """One row per model; each change is against the stock model on the same evaluation tokens."""
    rows, stocks = [], []
    for label, folder in SURFACES.items():
        doc = _load(folder / "geosteer_config.json")
        if doc is None:
            continue
        tr, ho = doc["meta"]["training"], doc["meta"]["training"]["heldout"]
        if ho["ppl_before"] is not None and all(s["heldout_tokens_cap"] != ho["max_tokens"] for s in stocks):
            stocks.append(_stock_row(ho["ppl_before"], ho["max_tokens"], tr["config"]["seed"],
                                     doc["meta"]["command"] + "  (ppl before training)"))
        rows.append({"method": label, "params": tr["parameter_overhead"]["surface_params"],
                     "param_fraction": tr["parameter_overhead"]["fraction"], "train_tokens": tr["tokens"],
                     "lr": tr["config"]["lr"], "layers": f"{doc['layers'][0]}-{doc['layers'][-1]}",
                     "heldout_ppl": ho["ppl_after"], "heldout_tokens_cap": ho["max_tokens"],
                     "seed": tr["config"]["seed"], "command": doc["meta"]["command"]})
    lora = _load(LORA)
    if lora is not None:
        m = lora["meta"]
        last = lora["rows"][-1]
        cap = m["train_config"]["eval_tokens"]
        rows.append({"method": f"LoRA q,v r={m['rank']}", "params": m["trainable_params"],
                     "param_fraction": m["trainable_params"] / m["model_params"], "train_tokens": last["tokens"],
                     "lr": m["train_config"]["lr"], "layers": f"{m['layers'][0]}-{m['layers'][-1]}",
                     "heldout_ppl": last["heldout_ppl"], "heldout_tokens_cap": cap,
                     "seed": last["seed"], "command": m["command"]})
        ref = lora_stock_reference(cap)
        if ref is not None and all(s["heldout_tokens_cap"] != cap for s in stocks):
            stocks.append(ref)
    by_cap = {s["heldout_tokens_cap"]: s for s in stocks}
    for r in stocks + rows:
        stock = by_cap.get(r["heldout_tokens_cap"])
        if stock is not None:
            r["abs_change"] = r["heldout_ppl"] - stock["heldout_ppl"]
            r["rel_change"] = r["abs_change"] / stock["heldout_ppl"]
    return stocks + rows


def main() -> None:
    out = ["# Attention-manifold study results (generated by `python paper/studies/manifold/report.py`)", "",
           "Every number comes from the JSON/CSV files under `docs/results/` and the artifacts; each table",
           "lists the command (with its seed) that produced it. Interpretation: `docs/manifold-study.md`.", "",
           "These tables read the first runs, whose held-out windows and prompts were encoded BOS-first; the",
           "re-runs with the tokenizer's own encoding (files named `*_tokenizer.json` under",
           "`docs/results/manifold/`) are in `docs/manifold-study.md` and the reproduction report.", ""]
    head = len(out)
    rows = ppl_rows()
    if rows:
        atomic_write_csv(RES / "manifold_ppl.csv", rows)
        out += ["## Held-out perplexity (context 512, stride 256)", "",
                "Each change is against the stock model on the same held-out tokens (the first N of the split).", "",
                "| method | layers | params (% of model) | train tokens | lr | held-out tokens | held-out ppl "
                "| change |",
                "|---|---|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            frac = f"{r['params']:,} ({100 * r.get('param_fraction', 0):.3f}%)"
            ch = f"{r['abs_change']:+.3f} ({100 * r['rel_change']:+.2f}%)" if "abs_change" in r else ""
            out.append(f"| {r['method']} | {r.get('layers', '')} | {frac} | {r['train_tokens']:,} | "
                       f"{r.get('lr', '')} | {r['heldout_tokens_cap']:,} | {r['heldout_ppl']:.4f} | {ch} |")
        out += ["", "Commands:", ""] + [
            f"- {r['method']} ({r['heldout_tokens_cap']:,} tokens): {_command(r['command'])}" for r in rows] + [""]
    cmp = _load(RES / "manifold_compare.json")
    if cmp is not None:
        out += ["## Output comparison: stock vs surfaces (greedy, 30 new tokens)", "",
                f"Command: {_command(cmp['meta']['command'])}", "",
                "| category | prompts | greedy changed | mean next-token KL (nats) |", "|---|---:|---:|---:|"]
        for s in cmp["meta"]["summary"]:
            out.append(f"| {s['category']} | {s['prompts']} | {100 * s['greedy_change_rate']:.0f}% | "
                       f"{s['mean_kl']:.4f} |")
        out.append("")
    st = _load(RES / "manifold_steering.json")
    if st is not None:
        m = st["meta"]
        out += ["## Steering: edits of the trained surfaces vs the unedited surfaces", "",
                f"Command: {_command(m['command'])}", "",
                f"Most sensitive layer (zeroing its surfaces, mean next-token KL): {m['layer']}.", "",
                "| condition | prompts | greedy changed | mean KL | sampled changed (paired seeds) |",
                "|---|---|---:|---:|---:|"]
        for s in m["summary"]:
            samp = (f"{100 * s['sampled_changed_frac']:.0f}% (per prompt {s['sampled_changed_min_max'][0]}–"
                    f"{s['sampled_changed_min_max'][1]} of {len(m['seeds'])})" if "sampled_changed_frac" in s else "")
            out.append(f"| {s['condition']} | {s['prompts_group']} ({s['prompts']}) | {s['greedy_changed']} | "
                       f"{s['mean_kl']:.5f} | {samp} |")
        out += ["", "Layer sensitivity:", "", "| layer | mean KL | max KL | ‖C‖ |", "|---:|---:|---:|---:|"]
        out += [f"| {r['layer']} | {r['mean_kl']:.5f} | {r['max_kl']:.5f} | {r['layer_norm']:.2f} |"
                for r in m["sensitivity"]]
        out.append("")
    out[head:head] = note()
    atomic_write_text(ROOT / "docs" / "manifold-study-results.md", "\n".join(out) + "\n")
    print("wrote docs/manifold-study-results.md")


if __name__ == "__main__":
    main()
