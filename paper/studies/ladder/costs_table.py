"""The scale ladder's costs table, from the runs' log: one row per study and model, written into
docs/ladder.md between the ``<!-- costs -->`` and ``<!-- /costs -->`` markers.

    python paper/studies/ladder/costs_table.py            # --csv docs/results/ladder/costs.csv --doc docs/ladder.md

Reads ``costs.csv`` (``paper/studies/ladder/run.sh`` appends a row per run: date, study, model, dtype, wall_s,
peak_rss_mib, exit, command, load_avg). Per study and model, the rows in file order: a run after a finished or
failed one replaces it (a rerun); a run after a stopped one (killed by a signal: exit 128 + n) continues it,
so the wall times add up, the peak RSS is the larger and the load is the wall-time-weighted mean. Studies
appear in the order of their first row, models in the ladder's order. A missing or malformed log or document, or
a bad flag, is refused in one line (exit 2) before anything is written.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Sequence
from pathlib import Path

from geosteer.errors import GeosteerError, one_line_usage
from geosteer.io_utils import atomic_write_text
from geosteer.readers import read_csv_rows, read_text
from geosteer_paper.scripts import run_script

RUNGS = ("smollm2", "gemma3-270m", "qwen2.5-0.5b", "qwen2.5-1.5b")
LABELS = {"surfaces": "surfaces (training)", "walls-sensitivity": "walls: layer sensitivity",
          "walls": "walls (item 1.24)", "change-rate": "change rate (items 1.13–1.15)"}
COLUMNS = ("date", "study", "model", "dtype", "wall_s", "peak_rss_mib", "exit", "command", "load_avg")
START, END = "<!-- costs -->", "<!-- /costs -->"
HEAD = ["| study | model | dtype | wall time | peak RSS | mean load | finished |", "|---|---|---|---|---|---|---|"]


def wall_text(seconds: float) -> str:
    """``4 s``, ``1 min 32 s``, ``12 min 06 s``, ``1 h 16 min`` (whole seconds; hours drop the seconds)."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s" if s // 60 >= 10 else f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def _stopped(code: int) -> bool:
    return code > 128  # killed by a signal (143: SIGTERM, 137: SIGKILL, 130: Ctrl-C): resumable


VALID = ("wall_s and peak_rss_mib are numbers >= 0, exit an integer 0 to 255, load_avg a number >= 0 or empty; "
         "study and model are not empty")


def _number(r: dict, col: str, where: str) -> float:
    v = r.get(col)
    try:
        x = float(v)
    except (TypeError, ValueError):
        x = math.nan
    if not (math.isfinite(x) and x >= 0):
        raise GeosteerError(f"{where}: {col} {v!r} is not valid; {VALID}")
    return x


def check_row(r: dict, where: str) -> dict:
    """A log row with its numbers read, or one line naming the column, the value and what is valid."""
    for col in ("study", "model"):
        if not (r.get(col) or "").strip():
            raise GeosteerError(f"{where}: {col} is empty; {VALID}")
    code = r.get("exit")
    if not (code or "").strip().isdigit() or int(code) > 255:
        raise GeosteerError(f"{where}: exit {code!r} is not valid; {VALID}")
    return {**r, "wall_s": _number(r, "wall_s", where), "peak_rss_mib": _number(r, "peak_rss_mib", where),
            "exit": int(code), "load_avg": _number(r, "load_avg", where) if (r.get("load_avg") or "").strip() else None}


def read_costs(path: str | Path) -> list[dict]:
    """The log's rows, checked: a readable CSV file, every column present, numbers where numbers belong."""
    rows = read_csv_rows(path, what="--csv")  # missing, a folder, not UTF-8, a ragged or unreadable CSV: one line
    header = list(rows[0]) if rows else read_text(path, what="--csv").partition("\n")[0].split(",")
    missing = [c for c in COLUMNS if c not in [h.strip() for h in header]]
    if missing:
        raise GeosteerError(f"--csv {path} lacks the column '{missing[0]}' (expected {', '.join(COLUMNS)})")
    return [check_row(r, f"--csv {path} line {i}") for i, r in enumerate(rows, start=2)]


def merge_runs(rows: Sequence[dict]) -> list[dict]:
    """One run per (study, model) by the module's rule, in table order."""
    runs: dict[tuple[str, str], dict] = {}
    for r in rows:
        key, prev = (r["study"], r["model"]), runs.get((r["study"], r["model"]))
        if prev is not None and _stopped(prev["exit"]):
            loads = [(x["load_avg"], x["wall_s"]) for x in (prev, r) if x["load_avg"] is not None]
            weight = sum(w for _, w in loads)
            r = {**r, "wall_s": prev["wall_s"] + r["wall_s"], "peak_rss_mib": max(prev["peak_rss_mib"],
                                                                                  r["peak_rss_mib"]),
                 "load_avg": sum(v * w for v, w in loads) / weight if loads and weight else None}
        runs[key] = r
    studies = list(dict.fromkeys(s for s, _ in runs))
    order = {m: i for i, m in enumerate(RUNGS)}
    return sorted(runs.values(), key=lambda r: (studies.index(r["study"]), order.get(r["model"], len(RUNGS)),
                                                r["model"]))


def table_lines(rows: Sequence[dict]) -> list[str]:
    """The markdown table of :func:`merge_runs`' runs."""
    out = list(HEAD)
    for r in merge_runs(rows):
        code = r["exit"]
        done = "yes" if code == 0 else ("stopped, resumable" if _stopped(code) else f"failed (exit {code})")
        load = "not logged" if r["load_avg"] is None else f"{r['load_avg']:.1f}"
        out.append(f"| {LABELS.get(r['study'], r['study'])} | {r['model']} | {r['dtype']} | {wall_text(r['wall_s'])} "
                   f"| {r['peak_rss_mib'] / 1024:.1f} GiB | {load} | {done} |")
    return out


def rewrite(doc: str, lines: Sequence[str]) -> str:
    """``doc`` with the text between the markers replaced by ``lines``."""
    found = re.search(re.escape(START) + r"\n.*?" + re.escape(END), doc, flags=re.S)
    if found is None or doc.count(START) != 1:
        raise GeosteerError(f"the document needs one '{START}' ... '{END}' block for the table")
    return doc[:found.start()] + "\n".join([START, *lines, END]) + doc[found.end():]


def parser() -> argparse.ArgumentParser:
    ap = one_line_usage(argparse.ArgumentParser(prog="python paper/studies/ladder/costs_table.py",
                                                description=__doc__.splitlines()[0]))
    ap.add_argument("--csv", type=Path, default=Path("docs/results/ladder/costs.csv"))
    ap.add_argument("--doc", type=Path, default=Path("docs/ladder.md"))
    ap.add_argument("--check", action="store_true", help="exit 1 when the document's table is out of date")
    return ap


def run(a: argparse.Namespace, argv: Sequence[str] | None) -> None:
    doc = read_text(a.doc, what="--doc")
    lines = table_lines(read_costs(a.csv))
    new = rewrite(doc, lines)
    if a.check:
        if new != doc:
            raise SystemExit(f"{a.doc}: the costs table is out of date; run python paper/studies/ladder/costs_table.py")
        return
    if new != doc:
        atomic_write_text(a.doc, new)
    print(f"{a.doc}: {len(lines) - len(HEAD)} rows")


def main(argv: Sequence[str] | None = None) -> None:
    run_script(parser(), run, argv)


if __name__ == "__main__":
    main()
