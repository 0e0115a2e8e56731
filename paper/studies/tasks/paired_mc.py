"""Paired comparison of two lm-eval multiple-choice runs on the same items (from ``--log_samples``).

Usage: python paper/studies/tasks/paired_mc.py BASE_DIR OTHER_DIR [OTHER_DIR ...] --task T --out F.json
For each metric (acc, acc_norm): both accuracies, the items that flipped each way (base right / other
wrong and the reverse) and the exact two-sided sign (McNemar) test on the flips; items are paired by
``doc_id``. With ``--by KEY`` the rows are also split by a field of the document (e.g. ``kind``).
"""

import argparse
import json
import sys
from pathlib import Path

from scipy.stats import binomtest

from geosteer_paper.lm_eval_runs import newest_file


def samples(run: str, task: str) -> dict[int, dict]:
    f = newest_file(run, f"samples_{task}_*.jsonl")
    if f is None:
        print(f"error: no samples_{task}_*.jsonl under {run} (run lm_eval with --log_samples)", file=sys.stderr)
        raise SystemExit(2)
    return {d["doc_id"]: d for d in map(json.loads, f.read_text().splitlines())}


def compare(base: dict[int, dict], other: dict[int, dict], metric: str, ids: list[int]) -> dict:
    b = [bool(base[i][metric]) for i in ids]
    o = [bool(other[i][metric]) for i in ids]
    lost = sum(x and not y for x, y in zip(b, o, strict=True))
    gained = sum(y and not x for x, y in zip(b, o, strict=True))
    p = binomtest(gained, gained + lost).pvalue if gained + lost else 1.0
    return {"metric": metric, "n": len(ids), "base_acc": sum(b) / len(ids), "other_acc": sum(o) / len(ids),
            "gained": gained, "lost": lost, "sign_test_p": p}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base")
    ap.add_argument("others", nargs="+")
    ap.add_argument("--task", required=True)
    ap.add_argument("--by", default=None, help="split rows by this document field too")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    base = samples(a.base, a.task)
    rows = []
    for run in a.others:
        other = samples(run, a.task)
        ids = sorted(set(base) & set(other))
        groups = {"all": ids}
        if a.by:
            for i in ids:
                groups.setdefault(str(base[i]["doc"].get(a.by)), []).append(i)
        for g, gids in groups.items():
            for metric in ("acc", "acc_norm"):
                rows.append({"base": Path(a.base).name, "other": Path(run).name, "group": g,
                             **compare(base, other, metric, gids)})
    Path(a.out).write_text(json.dumps({"task": a.task, "rows": rows}, indent=1) + "\n")
    print("| other | group | metric | n | base | other | gained | lost | sign-test p |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['other']} | {r['group']} | {r['metric']} | {r['n']} | {100 * r['base_acc']:.1f} | "
              f"{100 * r['other_acc']:.1f} | {r['gained']} | {r['lost']} | {r['sign_test_p']:.2f} |")


if __name__ == "__main__":
    main()
