"""Markdown tables from a paper/studies/directional/pretrain_downstream.py result file.

Usage: python paper/studies/directional/pretrain_downstream_table.py RESULT.json

Prints: final validation loss per variant and seed with the mean and the gap to the baseline (same seed,
then averaged), the mean gap along training (per eval step, seeds that have the variant and the
baseline), and the proxy-task scores (acc / acc_norm in %, mean over seeds, with the mean of lm-eval's
per-run standard errors).
"""

import json
import sys
from statistics import mean


def main(path: str) -> None:
    doc = json.loads(open(path).read())
    runs, curves, meta = doc["runs"], doc["curves"], doc["meta"]
    variants = list(dict.fromkeys(r["variant"] for r in runs))
    seeds = sorted({r["seed"] for r in runs})
    fin = {(r["variant"], r["seed"]): r for r in runs}
    print(f"steps {meta['steps']}, model {meta['model']}, params {runs[0]['params']}, seeds {seeds}\n")
    print("| variant | " + " | ".join(f"seed {s}" for s in seeds) + " | mean | vs baseline (paired) |")
    print("|---" * (len(seeds) + 3) + "|")
    for v in variants:
        vals = [fin[(v, s)]["final_val_loss"] if (v, s) in fin else None for s in seeds]
        got = [x for x in vals if x is not None]
        gaps = [fin[(v, s)]["final_val_loss"] - fin[("baseline", s)]["final_val_loss"]
                for s in seeds if (v, s) in fin and ("baseline", s) in fin]
        gap = "" if v == "baseline" or not gaps else (
            f"{mean(gaps):+.4f} ({', '.join(f'{g:+.3f}' for g in gaps)})")
        cells = [f"{x:.4f}" if x is not None else "—" for x in vals]
        print(f"| {v} | " + " | ".join(cells) + f" | {mean(got):.4f} | {gap} |")
    steps = sorted({c["step"] for c in curves})
    val = {(c["variant"], c["seed"], c["step"]): c["val_loss"] for c in curves}
    print("\nMean paired gap to the baseline along training (nats; negative = lower loss):\n")
    print("| step | " + " | ".join(str(s) for s in steps) + " |")
    print("|---" * (len(steps) + 1) + "|")
    for v in variants:
        row = []
        for st in steps:
            src = [s for s in seeds if (v, s, st) in val and ("baseline", s, st) in val]
            row.append(f"{mean(val[(v, s, st)] - val[('baseline', s, st)] for s in src):+.3f}" if src else "—")
        print(f"| {v} | " + " | ".join(row) + " |")
    gated = [c for c in curves if "mean_gate" in c]
    if gated:
        print("\nvalue_gated mean s_par (val tokens, all layers): "
              + ", ".join(f"step {st}: {mean(c['mean_gate'] for c in gated if c['step'] == st):.3f}"
                          for st in steps if any(c["step"] == st for c in gated)))
    tasks = list(dict.fromkeys(p["task"] for r in runs for p in r["proxy"]))
    if tasks:
        print("\nProxy tasks, % (mean over seeds; ± mean per-run lm-eval standard error), acc / acc_norm:\n")
        print("| variant | " + " | ".join(t.replace("proxy_", "") for t in tasks) + " | mean acc |")
        print("|---" * (len(tasks) + 2) + "|")
        for v in variants:
            cells, accs = [], []
            for t in tasks:
                ps = [p for r in runs if r["variant"] == v for p in r["proxy"] if p["task"] == t]
                a, an = mean(p["acc"] for p in ps), mean(p["acc_norm"] for p in ps)
                se = mean(p["acc_stderr"] for p in ps)
                accs.append(a)
                cells.append(f"{100 * a:.1f} / {100 * an:.1f} (±{100 * se:.1f}, {len(ps)} seeds)")
            print(f"| {v} | " + " | ".join(cells) + f" | {100 * mean(accs):.1f} |")


if __name__ == "__main__":
    main(sys.argv[1])
