"""Statuses computed from the results files: each item's named values are read, then its criteria are
tested. reproduces: every criterion holds; diverges: one fails; not run: no file, or a value unreadable."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from geosteer.reproduction.checks import CHECKS_FILE, COMMAND, read_checks
from geosteer.reproduction.items import Criterion, Item, PaperItems
from geosteer.reproduction.query import NotReadable, evaluate_query, read_results

STATUSES = ("reproduces", "diverges", "not run")


@dataclass
class ItemResult:
    """One item with geosteer's values and its computed status."""

    paper: str
    item: Item
    ours: dict[str, float] = field(default_factory=dict)
    status: str = "not run"
    why: str = ""  # the failed criterion, or the reason it did not run

    def record(self) -> dict:
        """The JSON record of the report (one per item)."""
        it = self.item
        return {"paper": self.paper, "item": f"{it.id} {it.name}", "id": it.id, "name": it.name,
                "claim": it.claim, "paper_value": it.paper_value, "ours": self.ours or None,
                "status": self.status, "why": self.why, "reading": it.reading, "command": self.command,
                "model": it.model, "results_file": self.results_file}

    @property
    def results_file(self) -> str | None:
        return CHECKS_FILE if self.item.check else self.item.results_file

    @property
    def command(self) -> str | None:
        return COMMAND if self.item.check and not self.item.command else self.item.command


def check(c: Criterion, ours: dict[str, float]) -> tuple[bool, str]:
    """Whether criterion ``c`` holds on the named values, and the one-line test it made."""
    if c.kind == "order":
        vals = [ours[n] for n in c.values]
        ok = all(a < b for a, b in zip(vals[:-1], vals[1:], strict=True))
        return ok, " < ".join(f"{n} {_g(ours[n])}" for n in c.values)
    if c.kind == "close":
        a, b = (ours[n] for n in c.values)
        return abs(a - b) <= c.band, f"|{c.values[0]} {_g(a)} − {c.values[1]} {_g(b)}| <= {_g(c.band)}"
    v = ours[c.value]
    name = f"{c.value} {_g(v)}"
    if c.kind == "below":
        return v < c.threshold, f"{name} < {_g(c.threshold)}"
    if c.kind == "above":
        return v > c.threshold, f"{name} > {_g(c.threshold)}"
    if c.kind == "between":
        return c.lo <= v <= c.hi, f"{_g(c.lo)} <= {name} <= {_g(c.hi)}"
    if c.kind == "within_rel":
        rel = abs(v - c.ref) / abs(c.ref) if c.ref else float("inf")
        return rel <= c.band, f"{name} within {c.band:.0%} of {_g(c.ref)} (off by {rel:.0%})"
    if c.kind == "within_abs":
        return abs(v - c.ref) <= c.band, f"{name} within ±{_g(c.band)} of {_g(c.ref)}"
    if c.kind == "sign":
        return (v > 0) if c.sign > 0 else (v < 0), f"{name} {'> 0' if c.sign > 0 else '< 0'}"
    return v == c.ref, f"{name} == {_g(c.ref)}"


def _g(x: float) -> str:
    return f"{x:.4g}"


def _results_path(item_file: str, roots: list[Path]) -> Path:
    """``item_file`` under the first root that holds it, as written (relative to the repository root) or
    with its leading ``docs/results/`` dropped (a root that is a results folder itself)."""
    short = item_file.removeprefix("docs/results/")
    for root in roots:
        for rel in (item_file, short):
            if (root / rel).is_file():
                return root / rel
    return roots[0] / item_file


def _g_or_zero(x: float) -> str:
    return "0" if x == 0 else f"{x:.2g}"


def evaluate_check(res: ItemResult, rows: list[dict]) -> ItemResult:
    """A check item's status from its records: reproduces when every error is within its tolerance."""
    if not rows:
        res.why = f"no record of this item in {Path(CHECKS_FILE).name}"
        return res
    parts, failed = [], []
    for name in dict.fromkeys(r["check"] for r in rows):
        sel = [r for r in rows if r["check"] == name]
        worst = max(float(r["max_abs_error"]) for r in sel)
        fams = [r["family"] for r in sel if r["family"] != "synthetic"]
        on = f"on {len(fams)} families" if fams else "on synthetic inputs"
        parts.append(f"{name}: max error {_g_or_zero(worst)} (tolerance {_g_or_zero(float(sel[0]['tolerance']))}) "
                     f"{on}")
        failed += [f"{name} on {r['family']}" for r in sel if not r.get("pass")]
    res.ours = {"max_abs_error": max(float(r["max_abs_error"]) for r in rows)}
    res.status = "diverges" if failed else "reproduces"
    res.why = ("fails: " + ", ".join(failed) + "; " if failed else "checked: ") + "; ".join(parts)
    return res


def evaluate_item(paper: str, item: Item, roots: list[Path]) -> ItemResult:
    """Read ``item``'s values from its results file (looked up under each root in turn) and test them."""
    res = ItemResult(paper=paper, item=item)
    if item.check:
        return evaluate_check(res, read_checks(_results_path(CHECKS_FILE, roots)).get(item.id, []))
    if item.results_file is None:
        res.why = "no results file"
        return res
    cache: dict[str, object] = {}
    try:
        for name, q in item.ours.items():
            rel = q.file or item.results_file
            if rel not in cache:
                cache[rel] = read_results(_results_path(rel, roots))
            try:
                res.ours[name] = evaluate_query(cache[rel], q)
            except NotReadable as e:
                raise NotReadable(f"{name}: {e} in {Path(rel).name}") from None
    except NotReadable as e:
        res.ours, res.why = {}, str(e)
        return res
    tests = [check(c, res.ours) for c in item.criteria]
    failed = [t for ok, t in tests if not ok]
    res.status = "diverges" if failed else "reproduces"
    res.why = "fails: " + "; ".join(failed) if failed else "; ".join(t for _, t in tests)
    return res


def evaluate_items(papers: list[PaperItems], roots: list[Path]) -> list[ItemResult]:
    """Every item of every paper, in paper and item order."""
    return [evaluate_item(p.paper, it, roots) for p in papers for it in p.items]


def counts(results: list[ItemResult]) -> list[dict]:
    """Items per paper and status, plus an 'all' row."""
    papers = list(dict.fromkeys(r.paper for r in results))
    rows = []
    for p in papers + ["all"]:
        sel = [r for r in results if p in ("all", r.paper)]
        rows.append({"paper": p, "items": len(sel), **{s: sum(r.status == s for r in sel) for s in STATUSES}})
    return rows
