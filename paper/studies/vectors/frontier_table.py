"""Markdown tables of a steering-frontier result file (``geosteer study vectors frontier``), one per behaviour,
and the matched-KL comparison of the learned steering surfaces with CAA.

    python paper/studies/vectors/frontier_table.py docs/results/vectors/frontier.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _f(x, fmt: str) -> str:
    return "–" if x is None else format(x, fmt)


def behaviour_table(rows: list[dict], behaviour: str) -> str:
    out = ["| lever | setting | target shift (nats, 95 % CI) | control KL (95 % CI) | KL all positions | ppl ratio |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        if r["behaviour"] != behaviour:
            continue
        out.append(f"| {r['lever']} | {r['setting']} | {r['target_shift']:+.3f} ({r['target_shift_lo']:+.3f} … "
                   f"{r['target_shift_hi']:+.3f}) | {r['control_kl']:.4f} ({r['control_kl_lo']:.4f} … "
                   f"{r['control_kl_hi']:.4f}) | {r['control_kl_all_positions']:.4f} | {r['ppl_ratio']:.4f} |")
    return "\n".join(out)


def matched_table(matched: list[dict]) -> str:
    out = ["| behaviour | learned steering surfaces | control KL | target shift (95 % CI) | CAA best at ≤ that KL "
           "| CAA interpolated at that KL | ahead (by the interval) |", "|---|---|---|---|---|---|---|"]
    for m in matched:
        out.append(f"| {m['behaviour']} | {m['setting']} | {m['control_kl']:.4f} | {m['target_shift']:+.3f} "
                   f"({m['target_shift_lo']:+.3f} … {m['target_shift_hi']:+.3f}) | {m['CAA_best_at_or_below']:+.3f} "
                   f"| {_f(m['CAA_interpolated'], '+.3f')} | {'yes' if m['ahead'] else 'no'} "
                   f"({'yes' if m['ahead_by_interval'] else 'no'}) |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("result", type=Path)
    a = ap.parse_args()
    doc = json.loads(a.result.read_text())
    rows = doc["rows"]
    for b in dict.fromkeys(r["behaviour"] for r in rows):
        print(f"### {b}\n\n{behaviour_table(rows, b)}\n")
    print(f"### matched control KL\n\n{matched_table(doc['meta']['matched_kl'])}")


if __name__ == "__main__":
    from geosteer.errors import one_line_errors

    with one_line_errors():
        main()
